"""Multimodal Inkling (issue 25): the towers and the fusion, tiny preset, image+audio+text prompt.

Faults (true location): ``renorm_fused_rows`` (fused), ``vision_fold_order`` (vision.layers.0),
``audio_codebook_offsets`` (audio.embed), each against transformers' InklingForConditionalGeneration
fp32, in fp32 and in bf16 with a control (inkling_model bf16 clean). Benign: bf16 vs fp32 with a
control (transformers bf16), and TP=2 vs TP=1 (fp32). A run's settings: ``impl`` (hf | native),
``tp`` (1 | 2).
"""
from __future__ import annotations

import os

import torch

from inkling_corpus.case import Case, Run, Trio

NAME = "multimodal"
FAULTS = {"renorm_fused_rows": "fused", "vision_fold_order": "vision.layers.0", "audio_codebook_offsets": "audio.embed"}
EXPLAIN = {"renorm_fused_rows": ("renormalised",), "vision_fold_order": ("reordered_input",),
           "audio_codebook_offsets": ("positionless_lookup",)}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _run(dtype: str, fault: str = "", **kw) -> Run:
    return Run(NAME, dtype, fault).with_(**kw)


def cases() -> list[Case]:
    ref = _run("fp32", impl="hf")
    out = [Case(f"{NAME}/{f}", "fault",
                {"fp32": Trio(ref, _run("fp32", f)), "bf16+ctl": Trio(ref, _run("bf16", f), _run("bf16"))},
                truth=(loc,), explain=EXPLAIN[f], note=f"planted {f}")
           for f, loc in FAULTS.items()]
    out.append(Case(f"{NAME}/bf16_vs_fp32", "benign", {"bf16+ctl": Trio(ref, _run("bf16"), _run("bf16", impl="hf"))},
                    note="inkling_model bf16 vs transformers fp32, control transformers bf16"))
    out.append(Case(f"{NAME}/tp2_vs_tp1", "benign", {"fp32": Trio(_run("fp32"), _run("fp32", tp=2))},
                    note="TP=2 vs TP=1, towers replicated"))
    return out


def _inputs(root: str):
    from inkling_model.config import InklingConfig
    from inkling_model.multimodal.checkpoint import write_multimodal_checkpoint
    from inkling_model.multimodal.config import MultimodalConfig
    from inkling_model.multimodal.processor import MediaInputs, expand_placeholders
    import numpy as np

    cfg = InklingConfig.preset("tiny")
    mm = MultimodalConfig.preset("tiny", cfg)
    ck = os.path.join(root, "multimodal_ck_seed0")
    if not os.path.isdir(ck):
        write_multimodal_checkpoint(cfg, mm, ck, seed=0)
    g = np.random.default_rng(0)
    t = np.arange(16000) / 16000  # 1 s: 20 frames over 11 levels (a lookup fit needs more frames than levels)
    media = MediaInputs.build(mm, [g.integers(0, 256, (5, 6, 3), dtype=np.uint8)],
                              [torch.tensor(0.3 * np.sin(2 * np.pi * (300 + 2000 * t) * t), dtype=torch.float32)])
    ids = expand_placeholders([1, 17, 42, mm.image_token_id, 99, 7, mm.audio_token_id, 300, 12], mm, media)
    return ck, ids, media


def _record(run: Run, dump: str, ck: str, ids, media) -> None:
    import inkling_probe
    from inkling_model.multimodal.config import MultimodalConfig
    from inkling_model.multimodal.hf_reference import hf_inputs, load_hf_mm_model, step
    from inkling_model.parallel import spawn
    from inkling_model.switches import faults

    if run.setting("impl") == "hf":
        model = load_hf_mm_model(ck, DTYPES[run.dtype])
        with torch.no_grad(), inkling_probe.record(model, dump, name_map="hf_inkling", writer="inline"):
            step(MultimodalConfig.from_pretrained(ck), torch.tensor(ids), media)
            model(**hf_inputs(torch.tensor(ids), media))
        return
    from inkling_model.multimodal.run import mm_native_rank

    with faults.activate([run.fault] if run.fault else []):
        os.environ["INKLING_FAULT"] = run.fault  # spawned ranks read the environment
        try:
            args = (ck, run.dtype, [ids], 0, None, dump, {"temperature": 0.0, "top_k": None, "seed": 0}, media)
            tp = int(run.setting("tp", 1))
            out = spawn(mm_native_rank, tp, *args) if tp > 1 else [mm_native_rank(0, 1, *args)]
        finally:
            os.environ.pop("INKLING_FAULT", None)
    errors = [r["error"] for r in out if "error" in r]
    if errors:
        raise RuntimeError(errors[0])


def record_many(items) -> dict:
    """Record every (run, dump); returns {run: error} for the runs that failed."""
    if not items:
        return {}
    ck, ids, media = _inputs(os.path.dirname(items[0][1]))
    failed = {}
    for run, dump in items:
        try:
            _record(run, dump, ck, ids, media)
        except Exception as e:  # noqa: BLE001 - one run's failure is reported, the others go on
            failed[run] = f"{type(e).__name__}: {e}"
    return failed

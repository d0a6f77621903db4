"""Late faults (issue 21): faults that sit after a benign near-tie routing flip, on longer prompts.

Before compare judged what follows a decision, a near-tie flip set aside its token and every later
token for every later key, and these faults passed silently (exit 0). Each case here is a planted
fault of 5 % or more, so a pass with exit 0 is a **silent pass** (report.py counts them; target 0).

- two transformers MoE families (Qwen2-MoE, Mixtral; 64-token prompts, so bf16 flips a near-tie
  early): a norm output x1.5 on the second half of the rows of a late layer, x1.1 on the rows
  from 8 of another, RoPE theta wrong (a fault that vanishes at position 0), a decode-only scale
  (teacher-forced decode steps); each with its benign bf16 pair, all in ``bf16+ctl``;
- inkling_model bf16 against transformers' Inkling fp32 (tiny, seed 3, 80 tokens: a near-tie flip
  at token 2 of layer 3): layers.4.attn_norm x1.5 on rows >= 40, and the benign pair.

- a hand-instrumented engine (corpus/late_probe.py): three independent faults written through
  ``probe()``, and a fault at a decode step after a different *decoded* token (a near-tie at step 0
  fed another token to step 1; steps 2-3 teacher-forced), with its benign twin.
"""
from __future__ import annotations

import torch

from inkling_corpus import plant
from inkling_corpus.case import Case, Run, Trio
from inkling_corpus.hf import Family, Mod

NAME = "late"
TOKENS = 64
INKLING_TOKENS = 80
L = "model.layers"


def _rows_from(first: int, factor: float):
    def fn(t):
        t = t.clone()
        t[..., first:, :] *= factor
        return t
    return fn


def _mods(layers: int) -> list[Mod]:
    last = layers - 1
    return [
        Mod("norm_x1.5_second_half", plant.output(f"{L}.{last}.input_layernorm", _rows_from(TOKENS // 2, 1.5)),
            (f"{L}.{last}.input_layernorm",), note="a late layer's attention norm x1.5 on rows >= T/2"),
        Mod("post_norm_x1.1_from_8", plant.output(f"{L}.{last - 1}.post_attention_layernorm", _rows_from(8, 1.1)),
            (f"{L}.{last - 1}.post_attention_layernorm",), note="a norm x1.1 on the rows from 8 on"),
        Mod("rope_theta", lambda m: None, ("model.rotary_emb.0", "model.rotary_emb.1"),
            config={"rope_parameters": {"rope_type": "default", "rope_theta": 3e3}},
            note="rope theta 3e3 where the config says otherwise (1e6 / 1e4): position 0 is exact"),
        Mod("decode_only_o_proj_x1.1", plant.from_call(f"{L}.{last - 1}.self_attn.o_proj", 1, lambda t: t * 1.1),
            (f"{L}.{last - 1}.self_attn.o_proj",), step=1, note="a decode-only kernel: o_proj x1.1 from step 1"),
    ]


def _families() -> dict:
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen2MoeForCausalLM

    from inkling_corpus import qwen2_moe

    def mixtral_config(**kw):
        base = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, vocab_size=256,
                    max_position_embeddings=256, initializer_range=0.1, tie_word_embeddings=False)
        base.update(kw)
        return MixtralConfig(**base)

    qcfg = lambda **kw: qwen2_moe.make_config(**{"max_position_embeddings": 256, **kw})
    mods = {m.name: m for m in _mods(4)}
    return {"qwen2_moe": Family("qwen2_moe", qcfg, Qwen2MoeForCausalLM, mods),
            "mixtral": Family("mixtral", mixtral_config, MixtralForCausalLM, mods)}


ARCHS = ("qwen2_moe", "mixtral")


def _run(arch: str, dtype: str, fault: str = "", **kw) -> Run:
    return Run(NAME, dtype, fault).with_(arch=arch, **kw)


def _hf_cases(arch: str) -> list[Case]:
    out = []
    for m in _mods(4):
        more = {"decode": 3} if m.step else {}
        trio = Trio(_run(arch, "fp32", **more), _run(arch, "bf16", m.name, **more),
                    _run(arch, "bf16", attn="sdpa", threads=2, **more))
        out.append(Case(f"{NAME}/{arch}_{m.name}", "fault", {"bf16+ctl": trio}, truth=m.truth, step=m.step,
                        note=m.note))
    trio = Trio(_run(arch, "fp32"), _run(arch, "bf16"), _run(arch, "bf16", attn="sdpa", threads=2))
    out.append(Case(f"{NAME}/{arch}_bf16_vs_fp32_{TOKENS}tok", "benign", {"bf16+ctl": trio},
                    note=f"bf16 vs fp32, {TOKENS} tokens (near-tie flips expected)"))
    return out


def _inkling_cases() -> list[Case]:
    ref = _run("inkling", "fp32", impl="hf")
    fault = _run("inkling", "bf16", "attn_norm_x1.5_rows40")
    return [Case(f"{NAME}/inkling_attn_norm_x1.5_rows40", "fault", {"bf16": Trio(ref, fault)},
                 truth=("layers.4.attn_norm",), note="issue 21's 80-token repro: a near-tie flip, then a late fault"),
            Case(f"{NAME}/inkling_bf16_vs_hf_fp32_{INKLING_TOKENS}tok", "benign",
                 {"bf16": Trio(ref, _run("inkling", "bf16"))}, note="the same pair without the fault")]


CASES = []  # more cases (e.g. three independent faults through probe()) may be appended here


def cases() -> list[Case]:
    from inkling_corpus import late_probe

    probe_cases = late_probe.cases(NAME, lambda fault="", **kw: _run("probe", "fp32", fault, **kw))
    return [c for a in ARCHS for c in _hf_cases(a)] + _inkling_cases() + probe_cases + list(CASES)


def _ids(vocab: int, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(4242)
    return torch.randint(3, vocab, (1, n), generator=gen)


def _record_hf(fams, run, dump) -> None:
    import inkling_probe
    from inkling_corpus.hf import _forward, _threads, build

    with _threads(run.setting("threads", 1)):
        model = build(fams[run.setting("arch")], run)
        with torch.no_grad(), inkling_probe.record(model, dump, writer="inline"):
            _forward(model, _ids(model.config.vocab_size, TOKENS), run.setting("decode", 0))


def _record_inkling(run, dump, root) -> None:
    import os

    import inkling_probe
    from inkling_corpus.inkling_runs import DTYPES, _hf, checkpoint

    ck = checkpoint(os.path.dirname(dump), "bf16", 3)
    ids = [(7 * i + 3) % 500 for i in range(INKLING_TOKENS)]
    if run.setting("impl") == "hf":
        _hf(ck, run.dtype, ids, dump)
        return
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    config = InklingConfig.from_pretrained(ck)
    model = InklingForCausalLM(config, dtype=DTYPES[run.dtype])
    load_checkpoint(model, ck, config)
    if run.fault:
        norm = next(m for n, m in model.named_modules() if n.endswith("layers.4.attn_norm"))
        norm.register_forward_hook(lambda m, a, o: _rows_from(40, 1.5)(o[None])[0])
    with torch.no_grad(), inkling_probe.recording(dump, writer="inline"):
        model(torch.tensor(ids))


def record_many(items) -> dict:
    import os

    fams, failed = None, {}
    for run, dump in items:
        try:
            if run.setting("arch") == "inkling":
                _record_inkling(run, dump, os.path.dirname(dump))
            elif run.setting("arch") == "probe":
                from inkling_corpus import late_probe
                late_probe.record(run, dump)
            else:
                fams = fams or _families()
                _record_hf(fams, run, dump)
        except Exception as e:  # one broken case must not hide the others
            failed[run] = f"{type(e).__name__}: {e}"
    return failed

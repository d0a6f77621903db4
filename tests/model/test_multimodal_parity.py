"""Multimodal inkling_model equals transformers' InklingForConditionalGeneration.

The same random tiny multimodal checkpoint (make-checkpoint's writer, towers included) in both;
transformers recorded with module capture and the shipped ``hf_inkling`` map, inkling_model with
its sinks, at TP=1 in-process and TP=2/4 in spawned gloo ranks. Every hMLP layer, the tower
outputs, the fused stream, every canonical decoder point and the logits, for image+text,
audio+text and image+audio+text prompts.
"""

import pytest
import torch

import inkling_probe
from inkling_model.config import InklingConfig
from inkling_model.model import probe_points
from inkling_model.multimodal.checkpoint import write_multimodal_checkpoint
from inkling_model.multimodal.config import MultimodalConfig
from inkling_model.multimodal.hf_reference import hf_inputs, load_hf_mm_model
from inkling_model.parallel import spawn

from mm_util import PROMPTS, prompt, run_mm_rank
from mm_util import compare_mm as compare

FP32_TOL = 1e-5
BF16_TOL = 0.0  # bf16 TP=1 vs transformers bf16: bit-identical on this CPU


def mm_keys(cfg, mm, kind):
    keys = []
    if "image" in kind:
        keys += [f"vision.layers.{i}" for i in range(mm.vision.num_hidden_layers)] + ["vision.out"]
    if "audio" in kind:
        keys += ["audio.embed", "audio.out"]
    return keys + ["fused"] + probe_points(cfg)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("mm")
    cfg = InklingConfig.preset("tiny")
    mm = MultimodalConfig.preset("tiny", cfg)
    write_multimodal_checkpoint(cfg, mm, d / "ckpt", seed=0)
    return dict(cfg=cfg, mm=mm, dir=d, ckpt=str(d / "ckpt"))


def _hf_dump(ckpt, kind, dtype=torch.float32, tag="fp32"):
    out = ckpt["dir"] / f"hf-{kind}-{tag}"
    if not out.exists():
        ids, media = prompt(ckpt["mm"], kind)
        hf = load_hf_mm_model(ckpt["ckpt"], dtype=dtype)
        with torch.no_grad(), inkling_probe.record(hf, out, name_map="hf_inkling"):
            inkling_probe.step()
            hf(**hf_inputs(ids, media))
    return str(out)


def _report(name, res):
    worst = max(res, key=res.get)
    print(f"\n{name}: {len(res)} keys, max rel_rms {res[worst]:.2e} at {worst}, fused {res['fused']:.2e}, "
          f"logits {res['logits']:.2e}")


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_hf_dump_has_every_multimodal_key(ckpt, kind):
    keys = set(inkling_probe.open(_hf_dump(ckpt, kind)).keys())
    assert not [k for k in mm_keys(ckpt["cfg"], ckpt["mm"], kind) if k not in keys]


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_tp1_fp32(ckpt, kind):
    ids, media = prompt(ckpt["mm"], kind)
    dump = str(ckpt["dir"] / f"tp1-{kind}")
    run_mm_rank(0, 1, ckpt["ckpt"], ids.tolist(), media, dump)
    res = compare(_hf_dump(ckpt, kind), dump, mm_keys(ckpt["cfg"], ckpt["mm"], kind))
    _report(f"TP=1 fp32 {kind}", res)
    assert max(res.values()) <= FP32_TOL, {k: v for k, v in res.items() if v > FP32_TOL}


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_tp1_bf16_bit_exact(ckpt, kind):
    ids, media = prompt(ckpt["mm"], kind)
    dump = str(ckpt["dir"] / f"tp1-bf16-{kind}")
    run_mm_rank(0, 1, ckpt["ckpt"], ids.tolist(), media, dump, "bf16")
    keys = mm_keys(ckpt["cfg"], ckpt["mm"], kind)
    res = compare(_hf_dump(ckpt, kind, torch.bfloat16, "bf16"), dump, keys)
    _report(f"TP=1 bf16 {kind}", res)
    assert max(res.values()) <= BF16_TOL, {k: v for k, v in res.items() if v > BF16_TOL}


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", list(PROMPTS))
def test_tp_fp32(ckpt, kind, world):
    ids, media = prompt(ckpt["mm"], kind)
    dump = str(ckpt["dir"] / f"tp{world}-{kind}")
    spawn(run_mm_rank, world, ckpt["ckpt"], ids.tolist(), media, dump)
    res = compare(_hf_dump(ckpt, kind), dump, mm_keys(ckpt["cfg"], ckpt["mm"], kind))
    _report(f"TP={world} fp32 {kind}", res)
    assert max(res.values()) <= FP32_TOL, {k: v for k, v in res.items() if v > FP32_TOL}
    from inkling_probe.compare import compare as toolkit_compare

    tp1 = ckpt["dir"] / f"tp1-{kind}"
    if not tp1.exists():
        run_mm_rank(0, 1, ckpt["ckpt"], ids.tolist(), media, str(tp1))
    benign = toolkit_compare(str(tp1), dump)  # the benign pair TP=1 vs TP=N: within tolerance
    assert not benign.diverged, benign.culprit


def test_towers_stay_replicated_in_model_dtype(ckpt):
    from mm_util import build

    model = build(ckpt["ckpt"], "bf16")
    assert {p.dtype for n, p in model.named_parameters() if n.startswith(("visual.", "audio."))} == {torch.bfloat16}


def test_nvfp4_checkpoint_keeps_bf16_towers_and_loads_both_sides(tmp_path):
    """make-checkpoint --quant nvfp4 --multimodal: the same bf16 towers as the bf16 twin (same seed),
    loadable by inkling_model and transformers; the image rows fused equal."""
    from inkling_model.checkpoint.shards import iter_tensors

    cfg = InklingConfig.preset("tiny", quant_method="nvfp4")
    mm = MultimodalConfig.preset("tiny", cfg)
    q = write_multimodal_checkpoint(cfg, mm, tmp_path / "q", seed=0, quant="nvfp4")
    b = write_multimodal_checkpoint(InklingConfig.preset("tiny"), mm, tmp_path / "b", seed=0)
    towers = lambda d: {n: t for _, n, t in iter_tensors(d) if n.startswith(("model.visual.", "model.audio."))}  # noqa: E731
    tq, tb = towers(q), towers(b)
    assert tq.keys() == tb.keys() and all(tq[n].dtype == torch.bfloat16 and torch.equal(tq[n], tb[n]) for n in tq)
    ids, media = prompt(mm, "image")
    dump = str(tmp_path / "nv")
    run_mm_rank(0, 1, str(q), ids.tolist(), media, dump)
    hf = load_hf_mm_model(str(q))
    with torch.no_grad():
        ref = hf.model.vision_tower(media.pixel_values).pooler_output
    got = inkling_probe.open(dump).tensor("vision.out")
    assert torch.equal(got, ref.reshape(got.shape))

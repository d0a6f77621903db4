"""inkling_model equals transformers' Inkling: logits and every canonical probe point.

The same random tiny model in both (transformers' random init with norms, scales and router bias
perturbed, copied under native names). transformers is recorded with module capture and the shipped
``hf_inkling`` name map; inkling_model with its own sinks, at TP=1 in-process and TP=2/4 in spawned
gloo ranks (the dump reader reassembles the shards from the declared layouts).
"""

import pytest
import torch
from safetensors.torch import save_file

import inkling_probe
from inkling_model.switches import faults
from inkling_model.config import InklingConfig
from inkling_model.model import probe_points
from inkling_model.parallel import spawn

from hf_util import hf_model, native_state
from parity_util import compare, run_rank

FP32_TOL = 1e-5
BF16_TOL = 1e-3  # bf16 vs transformers bf16: measured bit-identical (0) on this CPU; 1e-3 leaves room for other kernels
BF16_TP_TOL = 0.03  # bf16 TP=2 vs transformers bf16 (bf16 partial sums): measured max 6.8e-3, logits 3.1e-3
NUM_TOKENS = 24  # > window 8, > rel_extent 16, > log-scaling floor 8


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    cfg = InklingConfig.preset("tiny")
    hf = hf_model(cfg, seed=0)
    weights = str(d / "native.safetensors")
    save_file(native_state(hf), weights)
    ids = torch.randint(0, cfg.vocab_size, (NUM_TOKENS,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad(), inkling_probe.record(hf, d / "hf", name_map="hf_inkling"):
        hf(torch.tensor([ids]))
    return dict(cfg=cfg, weights=weights, ids=ids, dir=d, hf=str(d / "hf"), hf_model=hf)


def _report(name, res):
    worst = max(res, key=res.get)
    print(f"\n{name}: {len(res)} keys, max rel_rms {res[worst]:.2e} at {worst}, logits {res['logits']:.2e}")


def test_hf_dump_has_every_canonical_key(ref):
    keys = set(inkling_probe.open(ref["hf"]).keys())
    assert not [k for k in probe_points(ref["cfg"]) if k not in keys]


def test_tp1_fp32(ref):
    run_rank(0, 1, ref["cfg"].to_dict(), ref["weights"], ref["ids"], str(ref["dir"] / "tp1"))
    res = compare(ref["hf"], str(ref["dir"] / "tp1"), probe_points(ref["cfg"]))
    _report("TP=1 fp32", res)
    assert max(res.values()) <= FP32_TOL, {k: v for k, v in res.items() if v > FP32_TOL}


@pytest.mark.slow
@pytest.mark.parametrize("world,ep", [(2, False), (4, False), (2, True)], ids=["tp2", "tp4", "tp2-ep"])
def test_tp_fp32(ref, world, ep):
    dump = str(ref["dir"] / f"tp{world}{'ep' if ep else ''}")
    logits = spawn(run_rank, world, ref["cfg"].to_dict(), ref["weights"], ref["ids"], dump, "fp32", ep)
    assert all(torch.equal(logits[0], lg) for lg in logits[1:])  # every rank holds the full logits
    res = compare(ref["hf"], dump, probe_points(ref["cfg"]))
    _report(f"TP={world}{' EP' if ep else ''} fp32", res)
    assert max(res.values()) <= FP32_TOL, {k: v for k, v in res.items() if v > FP32_TOL}


def test_fault_renorm_rows_is_born_at_its_location(ref):
    """The comparison can fail: with renorm_rows on, the first key over tolerance is the fault's location."""
    dump = str(ref["dir"] / "renorm")
    with faults.activate("renorm_rows"):
        run_rank(0, 1, ref["cfg"].to_dict(), ref["weights"], ref["ids"], dump)
    keys = probe_points(ref["cfg"])
    res = compare(ref["hf"], dump, keys)
    first = next(k for k in keys if res[k] > FP32_TOL)
    assert first == faults.location("renorm_rows", ref["cfg"]) == "layers.1.attn_norm"
    r = inkling_probe.open(ref["hf"]).tensor(first)[0]
    row_err = (inkling_probe.open(dump).tensor(first) - r).norm(dim=-1) / r.norm(dim=-1)  # [T]
    assert torch.nonzero(row_err > 1e-3).flatten().tolist() == list(faults.RENORM_ROWS)


def test_bf16(ref):
    hf = hf_model(ref["cfg"], seed=0, dtype=torch.bfloat16)
    d = ref["dir"]
    with torch.no_grad(), inkling_probe.record(hf, d / "hf_bf16", name_map="hf_inkling"):
        hf(torch.tensor([ref["ids"]]))
    run_rank(0, 1, ref["cfg"].to_dict(), ref["weights"], ref["ids"], str(d / "bf16"), "bf16")
    keys = [k for k in probe_points(ref["cfg"]) if not k.endswith((".topk_idx", ".topk_w"))]
    res = compare(str(d / "hf_bf16"), str(d / "bf16"), keys)
    _report("TP=1 bf16 vs transformers bf16", res)
    assert max(res.values()) <= BF16_TOL, {k: v for k, v in res.items() if v > BF16_TOL}
    res32 = compare(ref["hf"], str(d / "bf16"), ["logits"])
    print(f"bf16 logits vs fp32 truth: {res32['logits']:.2e}")


@pytest.mark.slow
def test_tp2_bf16(ref):
    """bf16 at TP=2: partial sums are reduced in bf16, so it is no longer bit-identical; bounded."""
    d = ref["dir"]
    if not (d / "hf_bf16").exists():
        hf = hf_model(ref["cfg"], seed=0, dtype=torch.bfloat16)
        with torch.no_grad(), inkling_probe.record(hf, d / "hf_bf16", name_map="hf_inkling"):
            hf(torch.tensor([ref["ids"]]))
    spawn(run_rank, 2, ref["cfg"].to_dict(), ref["weights"], ref["ids"], str(d / "tp2bf16"), "bf16")
    keys = [k for k in probe_points(ref["cfg"]) if not k.endswith((".topk_idx", ".topk_w"))]
    res = compare(str(d / "hf_bf16"), str(d / "tp2bf16"), keys)
    _report("TP=2 bf16 vs transformers bf16", res)
    assert max(res.values()) <= BF16_TP_TOL, {k: v for k, v in res.items() if v > BF16_TP_TOL}

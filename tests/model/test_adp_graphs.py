"""CUDA graphs under attention-DP without a GPU: the graph path's padded steps run without capture
(``GraphRunner(capture=False)``) on one process whose DP peer is simulated (its collectives return a
copy of this rank's tensors), and on two spawned gloo ranks (`slow`): the in-graph recording's drain
names each replay's rows by request, as eager recording does. Logits: test_runtime_exact.py. Real
capture under DP (two or four GPUs; one GPU with a simulated peer): test_graphs_cuda.py."""

import pytest
import torch

from adp_graph_util import record_sides, same_rows


def _fake_dp_model():
    from inkling_model.checkpoint.synthetic import random_tensors
    from inkling_model.checkpoint.weights import load_tensors

    from test_graphs import _dp_model

    model, cfg = _dp_model(None, "cpu", lambda t: t.clone())
    load_tensors(model, random_tensors(cfg, 3), cfg)
    return model.eval()


def test_static_path_takes_the_fixed_gather_and_records_as_eager(tmp_path, monkeypatch):
    """Three requests on a batch size of 4 (a padding row): the static steps take the fixed-size
    gather, and their drained rows equal eager's: same keys, steps, shapes, requests meta, bits."""
    from inkling_model.layers.moe import MoE

    model = _fake_dp_model()
    calls = {"fixed": 0, "sized": 0}
    for name in calls:
        real = getattr(MoE, f"_routed_{name}")
        monkeypatch.setattr(MoE, f"_routed_{name}",
                            lambda self, *a, _r=real, _n=name: calls.__setitem__(_n, calls[_n] + 1) or _r(self, *a))
    prompts = [[5, 77, 300, 12, 9], [7], [1, 2, 3], [8], list(range(40, 51))]  # ours: 0, 2, 4 (rank 0 of 2)
    out = record_sides(model, str(tmp_path), prompts)
    assert out["eager"] == out["static"]
    moe_layers = sum(hasattr(layer.mlp, "experts") for layer in model.layers)
    # sized: both prefills and eager's 3 decode steps; fixed: the static side's 3 warm-ups (one per
    # batch size) and 3 decode steps
    assert calls["fixed"] == moe_layers * (3 + 3) and calls["sized"] == moe_layers * (1 + 3 + 1)
    assert same_rows(str(tmp_path / "eager"), str(tmp_path / "static")) == []
    from inkling_probe.store.dump import Dump

    d = Dump(str(tmp_path / "static"), dp_raw=True)
    assert [r["meta"]["requests"] for r in d.rows("logits", 2)] == [[[0, 1], [2, 1], [4, 1]]]
    assert tuple(d.rows("logits", 2)[0]["shape"]) == (3, 512)


@pytest.mark.slow
def test_dp2_static_recording_names_rows_as_eager(tmp_path):
    """DP 2 x TP 1 on two gloo ranks: every rank's drained rows equal its eager rows (requests meta
    and bits) with padding rows on both groups (3 and 2 requests on a batch of 4) and with group 1 idle
    (its padding request, as eager records it); the merged DP=1 views are equal too. A group's lone
    request padded to two rows ("lone") may move its fp32 router logits by an ulp: the CPU's fp32
    GEMM of one row is not the one of two rows (docs/GRAPHS.md); nothing else may differ."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig
    from inkling_model.parallel import spawn
    from inkling_probe.store.dump import Dump

    from adp_graph_util import CASES, dp_record_job

    ckpt = str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "ck", seed=3))
    ranks = spawn(dp_record_job, 2, ckpt, str(tmp_path))
    for case, prompts in CASES.items():
        assert all(r[case]["eager"] == r[case]["static"] for r in ranks), case
        differ = same_rows(str(tmp_path / case / "eager"), str(tmp_path / case / "static"),
                           near="router_logits" if case == "lone" else None)
        assert all(rank == 1 for _, _, rank in differ), differ
        print(f"\n{case}: {len(differ)} rows differ {differ[:3]}")
        merged = [Dump(str(tmp_path / case / side)) for side in ("eager", "static")]
        assert [r["meta"]["requests"] for r in merged[1].rows("logits", 1)] == [[[i, 1] for i in range(len(prompts))]]
        assert torch.equal(merged[0].tensor("logits", 2), merged[1].tensor("logits", 2))
    raw = Dump(str(tmp_path / "idle" / "static"), dp_raw=True)
    assert [r["meta"]["requests"] for r in raw.rows("logits", 2)] == [[[0, 1]], [[-1, 1]]]

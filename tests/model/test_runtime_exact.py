"""The runtime's eager decode (static buffers, the layers' decode branch) and its graph path run
without capture (steps padded to the captured batch sizes; under attention-DP the fixed-size MoE
gather, an idle group's padding steps) equal plain decode (generate) bit for bit, in bf16 and with
NVFP4 routed experts: at TP 1 here, at TP 2 and 4 and under attention-DP over gloo (spawned ranks,
`slow`). Over four ranks the padded side runs with the oneshot all-reduce (beside a plain run with it):
a ring sum over more than two ranks orders a row by its position, which padding moves. Graph replay ==
eager: test_graphs_cuda.py."""

import pytest
import torch

from inkling_model.config import InklingConfig

from runtime_util import both, check_equal, load, rank_job


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    root = tmp_path_factory.mktemp("ck")
    bf16 = write_random_checkpoint(InklingConfig.preset("tiny"), root / "bf16", seed=3)
    q = write_random_checkpoint(InklingConfig.preset("tiny", quant_method="nvfp4"), root / "nvfp4", seed=3,
                                quant="nvfp4")
    return {"bf16": str(bf16), "nvfp4": str(q)}


@pytest.mark.parametrize("fmt", ["bf16", "nvfp4"])
def test_runtime_eager_equals_plain_decode_tp1(ckpts, fmt):
    model = load(ckpts[fmt])
    if fmt == "nvfp4":
        assert any(layer.mlp.experts.weight_format.name == "nvfp4" for layer in model.layers if hasattr(layer.mlp, "experts"))
    out = both(model)
    check_equal(out, fmt)
    assert len(out["plain"][1][0]) == 14 and torch.isfinite(out["plain"][1][0]).all()


@pytest.mark.slow
@pytest.mark.parametrize("world,layouts,static_allreduce", [(2, [1, 2], None), (4, [1, 2], "oneshot")])
def test_runtime_eager_equals_plain_decode_tp_and_dp(ckpts, world, layouts, static_allreduce):
    """world 2: TP 2 and DP 2 x TP 1; world 4: TP 4 and DP 2 x TP 2 — bf16 and NVFP4, in one spawn;
    under DP group 0 decodes two requests, group 1 one (a padding row in the static steps), and again
    with group 1's request ending at once (that group then decodes padding steps only)."""
    from inkling_model.parallel import spawn

    ranks = spawn(rank_job, world, ckpts, layouts, static_allreduce)
    for rank, out in enumerate(ranks):
        for what, res in out.items():
            check_equal(res, f"rank {rank} {what}")
    assert [len(t) for t in ranks[-1]["bf16/dp2/idle"]["static"][0]] == [1], "group 1 never idled"
    assert len(ranks[0]["bf16/dp2/idle"]["static"][0][0]) > 1, "group 0 stopped with group 1"
    for what in ranks[0]:  # TP: the attention group's ranks hold the same tokens and logits
        dp = int(what.split("dp")[1].split("/")[0])
        tp = world // dp
        for rank in range(world):
            peer = (rank // tp) * tp
            assert ranks[rank][what]["plain"][0] == ranks[peer][what]["plain"][0], (what, rank)

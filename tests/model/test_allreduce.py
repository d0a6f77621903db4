"""All-reduce strategies: each runs its own code path at TP=1 (bit-exact identity), sums over 2
gloo ranks (oneshot in fixed rank order, the same bits on every rank), per-module selection, auto's
cache by message size, and the capture fault's one message size (capture simulated)."""
import pytest
import torch
import torch.distributed as dist

from inkling_model import allreduce
from inkling_model.switches import faults
from inkling_model.parallel import Group, free_port

from graph_util import tiny_model


@pytest.fixture(autouse=True)
def _fresh():
    allreduce.reset()
    yield
    allreduce.reset()


def test_spec_parsing_and_per_module_selection(monkeypatch):
    assert allreduce.parse("") == ("nccl", ())
    assert allreduce.parse("oneshot,layers.*.attn.o_proj=nccl") == ("oneshot", (("layers.*.attn.o_proj", "nccl"),))
    with pytest.raises(ValueError, match="unknown strategy 'ring'"):
        allreduce.parse("ring")
    monkeypatch.setenv(allreduce.ENV, "nccl,layers.5.*=auto,layers.*.attn.o_proj=oneshot")
    assert allreduce.strategy_for("layers.5.attn.o_proj") == "oneshot"  # last matching rule wins
    assert allreduce.strategy_for("layers.5.mlp.out") == "auto"
    assert allreduce.strategy_for("embed") == "nccl"
    with allreduce.use("oneshot"):
        assert allreduce.strategy_for("embed") == "oneshot"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tp1_each_strategy_is_an_exact_identity(dtype):
    x = torch.randn(3, 16).to(dtype)
    g = Group()
    for name in allreduce.STRATEGIES:
        with allreduce.use(name):
            assert torch.equal(allreduce.all_reduce(x.clone(), g, "layers.0.attn.o_proj"), x), name
    assert len(allreduce.ONESHOT.staging) == 1  # oneshot staged through its own buffer
    assert list(allreduce.AUTO.choice)[0][2] == x.numel() * x.element_size()  # auto tuned this size


def test_tp1_nccl_calls_the_collective_on_a_one_rank_group(monkeypatch):
    calls = []
    real = dist.all_reduce
    monkeypatch.setattr(dist, "all_reduce", lambda t, **kw: calls.append(t.shape) or real(t, **kw))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        x = torch.randn(2, 8)
        assert torch.equal(allreduce.all_reduce(x.clone(), Group(), "embed"), x)
    finally:
        dist.destroy_process_group()
    assert calls == [torch.Size([2, 8])]


def tp2_sums(rank, world) -> dict:
    """Each strategy on this rank's bf16 [4, 8] (seeded by rank) over the world (spawned by test_runtime)."""
    g = Group(rank, world, dist.group.WORLD)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank)).to(torch.bfloat16)
    out = {}
    for name in allreduce.STRATEGIES:
        with allreduce.use(name):
            out[name] = allreduce.all_reduce(x.clone(), g, "layers.0.attn.o_proj")
    return out


def check_tp2_sums(r0: dict, r1: dict) -> None:
    """Both ranks hold the sum; oneshot's is the fp32 sum in rank order, bit for bit."""
    xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(r)).to(torch.bfloat16) for r in range(2)]
    fixed = (xs[0].float() + xs[1].float()).to(torch.bfloat16)
    assert torch.equal(r0["oneshot"], fixed) and torch.equal(r1["oneshot"], fixed)
    assert torch.equal(r0["nccl"], r1["nccl"]) and torch.allclose(r0["nccl"].float(), fixed.float(), atol=1e-2)
    assert torch.equal(r0["auto"], r1["auto"])


def test_model_output_unchanged_by_strategy_at_tp1():
    model = tiny_model()
    ids = torch.arange(10, 22)
    with torch.no_grad():
        ref = model(ids)
        for name in ("oneshot", "auto", "nccl,layers.*.attn.o_proj=oneshot"):
            with allreduce.use(name):
                assert torch.equal(model(ids), ref), name


def test_capture_fault_hits_one_message_size_only(monkeypatch):
    """Capture simulated (no GPU here): one token row goes non-finite, two rows and eager stay exact."""
    monkeypatch.setattr(allreduce, "capturing", lambda x: True)
    g = Group()
    one, two = torch.randn(1, 16), torch.randn(2, 16)
    with allreduce.use("oneshot"):
        monkeypatch.setattr(allreduce, "capturing", lambda x: False)
        for x in (one, two):  # warm-up: staging buffers allocated outside capture
            allreduce.all_reduce(x.clone(), g, "x")
        monkeypatch.setattr(allreduce, "capturing", lambda x: True)
        assert torch.equal(allreduce.all_reduce(one.clone(), g, "x"), one)  # fault off
        with faults.activate("capture_unsafe_allreduce"):
            assert torch.isnan(allreduce.all_reduce(one.clone(), g, "x")).all()
            assert torch.equal(allreduce.all_reduce(two.clone(), g, "x"), two)
            monkeypatch.setattr(allreduce, "capturing", lambda x: False)
            assert torch.equal(allreduce.all_reduce(one.clone(), g, "x"), one)  # eager: correct
    with allreduce.use("nccl"), faults.activate("capture_unsafe_allreduce"):
        monkeypatch.setattr(allreduce, "capturing", lambda x: True)
        assert torch.equal(allreduce.all_reduce(one.clone(), g, "x"), one)  # the fault lives in oneshot


def test_capture_without_warm_up_is_refused(monkeypatch):
    monkeypatch.setattr(allreduce, "capturing", lambda x: True)
    for name, msg in (("oneshot", "no staging buffer"), ("auto", "not tuned at warm-up")):
        with allreduce.use(name), pytest.raises(RuntimeError, match=msg):
            allreduce.all_reduce(torch.randn(1, 4), Group(), "x")


def test_fault_location_is_documented():
    from inkling_model.config import InklingConfig
    assert faults.location("capture_unsafe_allreduce", InklingConfig.preset("tiny")) == "layers.0.attn.o_proj"

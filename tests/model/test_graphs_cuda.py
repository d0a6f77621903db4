"""Decode CUDA graphs on a GPU (tiny bf16 model): transparency, fidelity, the planted capture fault
found by graphdiff with full in-graph recording on, node counts, all-reduce strategies in capture
at TP=1 (1-rank NCCL group), and the in-graph buffer budget. Prints what docs/GRAPHS.md keeps."""
import contextlib

import pytest
import torch
import torch.distributed as dist

import inkling_probe
from inkling_model import allreduce
from inkling_model.switches import faults
from inkling_model.parallel import free_port
from inkling_model.runtime.runtime import Runtime
from inkling_probe.graphs import BudgetError
from inkling_probe.graphs.diff import graph_vs_eager
from inkling_probe.graphs.forward import NotAGraphPair
from inkling_probe.graphs.nodes import count_nodes, replay_events

from graph_util import tiny_model, tiny_nvfp4_model

pytestmark = pytest.mark.cuda
PROMPTS = [[5, 77, 300, 12, 9, 4], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]]
FAULT = "capture_unsafe_allreduce"


@pytest.fixture(scope="module")
def model():
    return tiny_model(torch.bfloat16, "cuda")


@pytest.fixture(autouse=True)
def _fresh():
    allreduce.reset()
    yield
    allreduce.reset()


def decode(model, cuda_graph, prompts=PROMPTS, steps=10, dump=None, **kw):
    """Prefill, then ``steps`` greedy decode steps; logits [steps, B, V] and the runtime."""
    rec = inkling_probe.recording(dump, writer="inline") if dump else contextlib.nullcontext()
    with rec, torch.no_grad():
        rt = Runtime(model, max_batch=4, max_len=64, cuda_graph=cuda_graph, enforce_eager=False,
                     batch_sizes=(1, 2, 4), **kw)
        slots, logits = rt.prefill(prompts)
        outs = []
        for _ in range(steps):
            logits = rt.decode(logits.argmax(-1).tolist(), slots)
            outs.append(logits.clone())
        torch.cuda.synchronize()
    return torch.stack(outs), rt


def test_transparency_and_fidelity(model, tmp_path):
    eager_off, _ = decode(model, False)
    eager_on, _ = decode(model, False, dump=str(tmp_path / "eager"))
    graph_off, _ = decode(model, True)
    graph_on, rt = decode(model, True, dump=str(tmp_path / "graph"))
    same = {"eager on==off": torch.equal(eager_on, eager_off), "graph on==off": torch.equal(graph_on, graph_off),
            "graph==eager": torch.equal(graph_off, eager_off)}
    slots = len(rt.runner.recording.layout(2).slots)
    print(f"\ntransparency (10 decode steps, batch 2, bf16): {same}; in-graph probes at bs=2: {slots}")
    assert same["eager on==off"] and same["graph on==off"]
    diff = graph_vs_eager(str(tmp_path / "eager"), str(tmp_path / "graph"))
    print(f"fidelity: {diff.summary()}")
    assert not diff.diverged and diff.exact == diff.rows
    # what ran, from the runtime's step meta: the prefill eager, every decode step a replay of the bs=2 graph
    assert diff.ran["steps"] == list(range(1, 11)) and diff.ran["graph_bs"] == [2]
    assert diff.ran["graph_side"] == "step 0 eager, steps 1-10 graph bs=2"
    assert diff.ran["eager_side"] == "step 0 eager, steps 1-10 static-eager"
    with pytest.raises(NotAGraphPair, match="eager side"):
        graph_vs_eager(str(tmp_path / "graph"), str(tmp_path / "graph"))


def test_graph_replay_equals_eager_nvfp4_experts(tmp_path_factory):
    """NVFP4 routed experts in the graph: the gathered dispatch (dequantized weights, activation
    fake-quant) replays bit-identically to the same runtime run eagerly; probes on and off."""
    model = tiny_nvfp4_model(tmp_path_factory.mktemp("q") / "nvfp4", torch.bfloat16, "cuda")
    tmp = tmp_path_factory.mktemp("dumps")
    eager, _ = decode(model, False)
    graph, _ = decode(model, True)
    graph_on, _ = decode(model, True, dump=str(tmp / "graph"))
    eager_on, _ = decode(model, False, dump=str(tmp / "eager"))
    same = {"graph==eager": torch.equal(graph, eager), "graph on==off": torch.equal(graph_on, graph)}
    print(f"\nNVFP4 experts (10 decode steps, batch 2, bf16): {same}, finite {bool(torch.isfinite(graph).all())}")
    assert all(same.values()) and torch.isfinite(graph).all()
    diff = graph_vs_eager(str(tmp / "eager"), str(tmp / "graph"))
    print(f"fidelity: {diff.summary()}")
    assert not diff.diverged and diff.exact == diff.rows


def _tp_graph_rank(rank, world):
    """One rank of a TP runtime on its GPU (NCCL): eager and graph decode of the same requests."""
    from inkling_model import parallel
    from inkling_model.checkpoint.synthetic import random_tensors
    from inkling_model.checkpoint.weights import load_tensors
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM

    torch.cuda.set_device(rank)
    cfg = InklingConfig.preset("tiny")
    model = InklingForCausalLM(cfg, parallel.init(), torch.bfloat16)
    load_tensors(model, random_tensors(cfg, 3), cfg)
    model = model.to("cuda").eval()
    out = {}
    for strategy in ("nccl", "oneshot"):
        with allreduce.use(strategy):
            eager, _ = decode(model, False, steps=4)
            graph, _ = decode(model, True, steps=4)
        out[strategy] = (eager.cpu(), graph.cpu())
    return out


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tp2_graph_replay_equals_eager():
    """TP 2 over NCCL, one GPU a rank: graph replay equals the eager runtime on every rank, with each
    all-reduce strategy, and both ranks hold the same logits."""
    from inkling_model.parallel import spawn

    r0, r1 = spawn(_tp_graph_rank, 2, backend="nccl")
    for strategy in ("nccl", "oneshot"):
        print(f"\nTP 2 {strategy}: graph == eager rank 0 {torch.equal(*r0[strategy])}, rank 1 "
              f"{torch.equal(*r1[strategy])}, ranks equal {torch.equal(r0[strategy][1], r1[strategy][1])}")
        assert torch.equal(*r0[strategy]) and torch.equal(*r1[strategy])
        assert torch.equal(r0[strategy][1], r1[strategy][1])


def test_capture_fault_found_with_full_recording(model, tmp_path):
    prompt = [PROMPTS[0]]  # one request: decode all-reduces carry [1, H] = 128 x 2 bytes
    with allreduce.use("oneshot"), faults.activate(FAULT):
        eager, _ = decode(model, False, prompt, steps=4, dump=str(tmp_path / "eager"))
        graph_off, _ = decode(model, True, prompt, steps=4)
        graph_on, _ = decode(model, True, prompt, steps=4, dump=str(tmp_path / "graph"))
        two, _ = decode(model, True, PROMPTS, steps=4)  # batch 2: another message size, clean
    print(f"\nfault: eager finite {bool(torch.isfinite(eager).all())}, graph (probes off) finite "
          f"{bool(torch.isfinite(graph_off).all())}, graph (full in-graph recording) finite "
          f"{bool(torch.isfinite(graph_on).all())}, batch-2 graph finite {bool(torch.isfinite(two).all())}")
    assert torch.isfinite(eager).all() and torch.isfinite(two).all()
    assert not torch.isfinite(graph_off).any() and not torch.isfinite(graph_on).any()
    diff = graph_vs_eager(str(tmp_path / "eager"), str(tmp_path / "graph"))
    print(f"graphdiff: {diff.summary()}")
    assert (diff.first["key"], diff.first["step"]) == (faults.location(FAULT, model.config), 1)
    d = inkling_probe.open(str(tmp_path / "graph"))
    born = d.tensor("layers.0.attn.o_proj", 1)
    before = d.tensor("layers.0.attn.out", 1)
    print(f"recorded at step 1: layers.0.attn.out finite {bool(torch.isfinite(before).all())}, "
          f"layers.0.attn.o_proj non-finite {int((~torch.isfinite(born)).sum())} of {born.numel()}; "
          f"step 0 (prefill) o_proj finite {bool(torch.isfinite(d.tensor('layers.0.attn.o_proj', 0)).all())}")
    assert torch.isfinite(before).all() and not torch.isfinite(born).any()


def _nodes(model, dump=None):
    rec = inkling_probe.recording(dump, writer="inline") if dump else contextlib.nullcontext()
    with rec, torch.no_grad():
        rt = Runtime(model, max_batch=1, max_len=32, cuda_graph=True, batch_sizes=(1,), debug_graphs=True)
        rt.prefill([PROMPTS[0]])
        runner = rt.capture()
        slots = len(runner.recording.layout(1).slots) if runner.recording else 0
        nodes = count_nodes(runner.graphs[1])
        nodes["profiled"] = replay_events(runner.graphs[1])
        return nodes, slots


def test_off_probes_add_no_node(model, tmp_path, monkeypatch):
    off, _ = _nodes(model)
    on, slots = _nodes(model, str(tmp_path / "d"))
    with monkeypatch.context() as m:  # the probe calls removed from the source, in effect
        m.setattr(inkling_probe, "probe", lambda *a, **k: None)
        m.setattr(inkling_probe, "step", lambda **layout: None)
        stripped, _ = _nodes(model)
    print(f"\nnodes: probes off {dict(off)}, probe calls removed {dict(stripped)}, "
          f"recording on {dict(on)} ({slots} in-graph probes)")
    assert off == stripped
    assert on["total"] - off["total"] == slots and on["profiled"] - off["profiled"] == slots


def test_allreduce_strategies_in_capture_at_tp1(model):
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        out = {}
        for name in allreduce.STRATEGIES:
            with allreduce.use(name):
                eager, _ = decode(model, False, steps=4)
                graph, _ = decode(model, True, steps=4)
            out[name] = (eager, graph)
            print(f"\n{name} (1-rank NCCL group): graph == eager {torch.equal(eager, graph)}")
            assert torch.equal(eager, graph)
        print(f"auto picked: {sorted(set(allreduce.AUTO.choice.values()))}")
        assert torch.equal(out["nccl"][1], out["oneshot"][1]) and torch.equal(out["nccl"][1], out["auto"][1])
    finally:
        dist.destroy_process_group()


def test_budget_error_at_capture(model, tmp_path, monkeypatch):
    monkeypatch.setenv("INKLING_PROBE_GRAPH_MB", "0.01")
    with pytest.raises(BudgetError, match="over the 0.01 MiB budget") as e:
        decode(model, True, steps=1, dump=str(tmp_path / "d"))
    print(f"\nbudget: {e.value}")


def _dp_graph_rank(rank, world, ckpts, root):
    """One rank of DP 2 x TP world/2 on its GPU (NCCL): each format's requests decoded by the eager runtime,
    by graph replay and by the same padded steps uncaptured (``capture=False``), then recorded by
    replay and uncaptured; every step's logits of this rank's requests."""
    from runtime_util import _side, load

    from adp_graph_util import CASES, record_sides

    torch.cuda.set_device(rank)
    out = {}
    for fmt, ckpt in ckpts.items():
        model = load(ckpt, dp=2).to("cuda")
        for case, prompts in CASES.items():
            mine = list(range(model.tp.dp_peers.rank, len(prompts), 2))
            own = [prompts[i] for i in mine]
            with allreduce.use("nccl"):
                sides = {name: _side(model, name, own, mine, 6, None) for name in ("runtime", "static")}
                sides["graph"] = _graph_side(model, own, mine)
            out[f"{fmt}/{case}"] = {k: ([list(t) for t in v[0]], [s.cpu() for s in v[1]]) for k, v in sides.items()}
            record_sides(model, f"{root}/{fmt}/{case}", prompts, sides=("graph", "static"))
    return out


def _graph_side(model, own, mine):
    steps = [[] for _ in own]
    rt = Runtime(model, max_batch=4, max_len=max([len(p) for p in own], default=1) + 6, cuda_graph=True,
                 enforce_eager=False, batch_sizes=(1, 2, 4))
    res = rt.generate(own, 6, None, request_ids=mine, on_step=lambda i, lg: steps[i].append(lg.clone()))
    return [r.tokens for r in res], [torch.stack(s).float() for s in steps]


@pytest.mark.parametrize("world", [2, 4])
def test_dp2_graph_replay_equals_uncaptured_steps(tmp_path, world):
    """DP 2 x TP 1 (2 GPUs) and DP 2 x TP 2 (4 GPUs) over NCCL, one GPU a rank, bf16 and NVFP4 experts:
    graph replay (fixed-size MoE gather captured) equals the same padded steps run uncaptured bit for
    bit, with padding rows on both groups, a lone row padded, and group 1 idle (its padding request
    replayed); at DP 2 x TP 1 it equals the eager runtime where no real row is padded ("idle": group 0's
    one request; padded GEMMs may round otherwise, printed). Recorded replays name the same rows,
    requests and bits as the uncaptured steps record."""
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig
    from inkling_model.parallel import spawn

    from adp_graph_util import CASES, same_rows

    ckpts = {"bf16": str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "bf16", seed=3)),
             "nvfp4": str(write_random_checkpoint(InklingConfig.preset("tiny", quant_method="nvfp4"),
                                                  tmp_path / "nvfp4", seed=3, quant="nvfp4"))}
    ranks = spawn(_dp_graph_rank, world, ckpts, str(tmp_path / "rec"), backend="nccl")
    for rank, out in enumerate(ranks):
        for what, sides in out.items():
            same = {f"graph=={k}": sides["graph"][0] == sides[k][0]
                    and all(torch.equal(a, b) for a, b in zip(sides["graph"][1], sides[k][1]))
                    for k in ("static", "runtime")}
            print(f"\nDP 2 x TP {world // 2} rank {rank} {what}: {same}")
            assert same["graph==static"], (rank, what)
            if what.endswith("idle") and world == 2:
                assert same["graph==runtime"], (rank, what)
    for fmt in ckpts:
        for case in CASES:
            base = tmp_path / "rec" / fmt / case
            differ = same_rows(str(base / "static"), str(base / "graph"), check_forward=False)
            print(f"recording {fmt}/{case}: graph rows == uncaptured rows, {len(differ)} differ")
            assert differ == []


@pytest.mark.parametrize("quant", [None, "nvfp4"])
def test_dp_graph_capture_on_one_gpu_with_simulated_peer(tmp_path, quant):
    """One GPU: rank 0 of DP 2 x TP 1 whose peer is simulated (its collectives return a copy of this
    rank's tensors, as tests/model/test_graphs.py's): the fixed-size MoE gather, padding masks and
    device-tensor counts captured for real (NCCL inside the graph is what it leaves out: the 2-GPU test
    above). Three requests on a batch of 4 (a padding row): replay equals the uncaptured steps bit for
    bit, probes on and off, and the recorded replay names the same rows and requests."""
    from test_graphs import _dp_model, _fill

    from adp_graph_util import record_sides, same_rows

    model, _ = _dp_model(quant, "cuda", lambda t: t.clone())
    _fill(model)
    model.eval()
    prompts = [[5, 77, 300, 12, 9], [7], [1, 2, 3], [8], list(range(40, 51))]  # ours: 0, 2, 4
    own, mine = prompts[0::2], [0, 2, 4]
    logits = {}
    for name, kw in (("graph", {}), ("static", dict(capture=False))):
        steps = [[] for _ in own]
        rt = Runtime(model, max_batch=4, max_len=20, cuda_graph=True, enforce_eager=False, batch_sizes=(1, 2, 4), **kw)
        res = rt.generate(own, 5, None, request_ids=mine, on_step=lambda i, lg, s=steps: s[i].append(lg.clone()))
        logits[name] = ([r.tokens for r in res], [torch.stack(s) for s in steps])
    same = logits["graph"][0] == logits["static"][0] and all(
        torch.equal(a, b) for a, b in zip(logits["graph"][1], logits["static"][1]))
    print(f"\nsimulated DP 2 ({quant or 'bf16'} experts): graph == uncaptured {same}, "
          f"finite {all(bool(torch.isfinite(x).all()) for x in logits['graph'][1])}")
    assert same
    record_sides(model, str(tmp_path), prompts, sides=("graph", "static"))
    differ = same_rows(str(tmp_path / "static"), str(tmp_path / "graph"), check_forward=False)
    print(f"recorded: graph rows == uncaptured rows ({len(differ)} differ)")
    assert differ == []

"""In-graph recording without a GPU: the plan/capture/drain path run eagerly on the CPU (the capture
pass copies into the arena as a captured graph would), the budget error, and the sink redirect."""
import pytest
import torch

import inkling_probe
from inkling_probe.graphs import BudgetError
from inkling_probe.graphs.nodes import node_kinds
from inkling_probe.graphs.session import InGraphRecording
from inkling_probe.graphs.static import ALIGN, budget_bytes


def step_fn(x):
    """A 'decode step' with probes: what a model forward looks like to the sink."""
    inkling_probe.step()
    h = x * 2  # [B, 4]
    inkling_probe.probe("a", h)
    inkling_probe.probe("b.idx", h.argmax(-1))
    inkling_probe.probe("c", (h + 1).to(torch.bfloat16), shard="concat", dim=1)
    return h.sum()


def _read(path):
    d = inkling_probe.open(str(path))
    try:
        return {(r["key"], r["step"]): d.tensor(r["key"], step=r["step"]) for r in d.index}
    finally:
        d.close()


def test_replayed_recording_equals_eager(tmp_path):
    xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    with inkling_probe.recording(tmp_path / "eager", writer="inline"):
        for x in xs:
            step_fn(x)
    with inkling_probe.recording(tmp_path / "graph", writer="inline") as rec:
        ig = InGraphRecording(rec, "cpu")
        with ig.planning(4):
            step_fn(torch.zeros(4, 4))  # warm-up at the padded size: nothing recorded
        assert [s.name for s in ig.layout(4).slots] == ["a", "b.idx", "c"]
        assert all(s.offset % ALIGN == 0 for s in ig.layout(4).slots)
        static_x = torch.zeros(4, 4)
        for x in xs:  # "replay": the capture pass, then the drain under the replay's step id
            static_x[:3] = x
            inkling_probe.step()
            with ig.capturing(4):
                step_fn(static_x)
            ig.after_replay(4, rows=3)
            ig.hand_over()
    eager, graph = _read(tmp_path / "eager"), _read(tmp_path / "graph")
    assert sorted(eager) == sorted(graph) and len(eager) == 9
    for k in eager:
        assert torch.equal(eager[k], graph[k]), k


def test_filters_apply_at_plan_and_budget_error(tmp_path, monkeypatch):
    with inkling_probe.recording(tmp_path / "d", writer="inline", include="a,c") as rec:
        ig = InGraphRecording(rec, "cpu")
        with ig.planning(1):
            step_fn(torch.zeros(1, 4))
        assert [s.name for s in ig.layout(1).slots] == ["a", "c"]
        small = InGraphRecording(rec, "cpu", budget=100)
        with pytest.raises(BudgetError, match=r"needs 0\.00 MiB .*2 probes.*INKLING_PROBE_GRAPH_MB"):
            with small.planning(1):
                step_fn(torch.zeros(1, 4))
    monkeypatch.setenv("INKLING_PROBE_GRAPH_MB", "0.5")
    assert budget_bytes() == 2**19
    monkeypatch.setenv("INKLING_PROBE_GRAPH_MB", "lots")
    with pytest.raises(BudgetError, match="expected a size in MiB"):
        budget_bytes()


def test_capture_must_match_the_plan(tmp_path):
    with inkling_probe.recording(tmp_path / "d", writer="inline") as rec:
        ig = InGraphRecording(rec, "cpu")
        with ig.planning(2):
            step_fn(torch.zeros(2, 4))
        with pytest.raises(RuntimeError, match="warm-up"):
            with ig.capturing(2):
                step_fn(torch.zeros(3, 4))  # another shape than planned


def test_redirect_restores_the_recorder(tmp_path):
    class Spy:
        def __init__(self):
            self.names = []

        def record(self, name, tensor, **kw):
            self.names.append(name)

        def next_step(self):
            pass

    spy = Spy()
    with inkling_probe.sink.redirected(spy):
        assert inkling_probe.enabled()
        step_fn(torch.zeros(1, 4))
    assert spy.names == ["a", "b.idx", "c"] and not inkling_probe.enabled()


def test_node_kinds_from_dot():
    dot = '\n'.join(['digraph dot {', 'subgraph cluster_1 {',
                     '"graph_1_node_0"[style="solid" shape="record" label="{KERNEL\\n| ...}"];',
                     '"graph_1_node_1"[style="solid" shape="record" label="{MEMCPY\\n| ...}"];',
                     '"graph_1_node_0" -> "graph_1_node_1";', '}', '}'])
    assert node_kinds(dot) == {"kernel": 1, "memcpy": 1}


def test_drain_only_wanted_steps(tmp_path):
    with inkling_probe.recording(tmp_path / "d", writer="inline", steps="1") as rec:
        ig = InGraphRecording(rec, "cpu")
        with ig.planning(1):
            step_fn(torch.zeros(1, 4))
        for i in range(3):
            inkling_probe.step()
            with ig.capturing(1):
                step_fn(torch.full((1, 4), float(i)))
            ig.after_replay(1)
            assert ig.hand_over() == (ig.layout(1).used if i == 1 else 0)
    assert sorted({(r["key"], r["step"]) for r in inkling_probe.open(str(tmp_path / "d")).index}) == [
        ("a", 1), ("b.idx", 1), ("c", 1)]


def test_replay_layout_names_the_rows(tmp_path):
    """A graph's slots are planned at a warm-up whose rows were padding (its step layout says so);
    each replay's own layout (which requests its real rows hold) is what the drain stores, the probes'
    own meta kept: the same rows and meta as eager recording of those requests."""
    def step(x, **layout):
        inkling_probe.step(**layout)
        inkling_probe.probe("a", x * 2)
        inkling_probe.probe("idx", x.argmax(-1), kind="decision", scores="a")

    reqs = [[[7, 1], [9, 1]], [[7, 1]]]
    xs = [torch.randn(len(r), 4, generator=torch.Generator().manual_seed(i)) for i, r in enumerate(reqs)]
    with inkling_probe.recording(tmp_path / "eager", writer="inline"):
        for x, r in zip(xs, reqs):
            step(x, forward="static-eager", requests=r)
    with inkling_probe.recording(tmp_path / "graph", writer="inline") as rec:
        ig = InGraphRecording(rec, "cpu")
        with ig.planning(4):
            step(torch.zeros(4, 4), forward="graph", graph_bs=4, requests=None)  # warm-up: padding rows
        static_x = torch.zeros(4, 4)
        for x, r in zip(xs, reqs):
            static_x.zero_()
            static_x[: len(r)] = x
            layout = dict(forward="static-eager", requests=r)
            inkling_probe.step(**layout)
            with ig.capturing(4):
                step(static_x, forward="graph", graph_bs=4, requests=None)
            ig.after_replay(4, rows=len(r), layout=layout)
            ig.hand_over()
    e, g = inkling_probe.open(str(tmp_path / "eager")), inkling_probe.open(str(tmp_path / "graph"))
    assert [(r["key"], r["step"], r["shape"], r["meta"]) for r in e.index] == \
        [(r["key"], r["step"], r["shape"], r["meta"]) for r in g.index]
    assert g.rows("idx", 1)[0]["meta"] == {"forward": "static-eager", "requests": [[7, 1]], "kind": "decision",
                                           "scores": "a"}
    for r in e.index:
        assert torch.equal(e.tensor(r["key"], r["step"]), g.tensor(r["key"], r["step"]))

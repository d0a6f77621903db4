"""Probes that trace: a compiled model records inside its graph (the registered op), with no graph
break and no recompile per key, outputs unchanged, and the same dump an eager recording makes."""
import pytest
import torch

import inkling_probe
from inkling_probe.compiled.watch import watch

import tiny_hf
from tiny_hf import IDS

BACKEND = "aot_eager"  # Inductor's C++ compile of these models takes ~25 s each here: test_inductor.py has it


class Count:
    """A backend that counts inkling_probe::emit nodes in each graph dynamo hands it, then runs aot_eager."""

    def __init__(self):
        self.emits: list[int] = []

    def __call__(self, gm, inputs):
        self.emits.append(sum("inkling_probe.emit" in str(n.target) for n in gm.graph.nodes))
        from torch._dynamo.backends.common import aot_autograd  # noqa: F401 - aot_eager is registered
        return torch._dynamo.lookup_backend(BACKEND)(gm, inputs)


@pytest.fixture(scope="module", params=["llama", "inkling"])
def compiled(request, tmp_path_factory):
    """(name, model, eager recording, what each compiled phase did) for one tiny transformers model."""
    torch._dynamo.reset()
    model = {"llama": tiny_hf.llama, "inkling": lambda: tiny_hf.inkling(hidden=32, layers=2, vocab=128, heads=2)}[
        request.param]()
    root = tmp_path_factory.mktemp(request.param)
    count = Count()
    c = torch.compile(model, backend=count)
    out = {}
    with torch.no_grad():
        with inkling_probe.record(model, root / "eager"):
            out["eager"] = model(IDS).logits
        with watch() as out["off_watch"]:
            out["off"] = c(IDS).logits
        out["off_emits"] = list(count.emits)
        with inkling_probe.record(model, root / "compiled"):
            with watch() as out["on_watch"]:
                out["on"] = c(IDS).logits
            with watch() as out["again_watch"]:
                out["again"] = c(IDS).logits
        out["on_emits"] = count.emits[len(out["off_emits"]):]
    return request.param, root, out


def test_no_graph_break_no_recompile(compiled):
    name, _, out = compiled
    on, again = out["on_watch"], out["again_watch"]
    assert on.graph_breaks == 0, on.break_reasons
    assert again.frames == 0 and again.graphs == 0  # the second recorded forward compiled nothing
    print(f"{name}: probes off {out['off_watch'].summary()}; recording {on.summary()}; again {again.summary()}")


def test_probes_off_leave_no_node_and_on_are_in_the_graph(compiled):
    _, root, out = compiled
    assert out["off_emits"] == [0]
    d = inkling_probe.open(root / "compiled")
    assert sum(out["on_emits"]) == len(d.index) // 2  # two forwards: every row came from an emit node
    assert all(r["meta"].get("compiled") == 1 for r in d.index)


def test_outputs_unchanged_and_dump_equals_eager(compiled):
    _, root, out = compiled
    assert torch.equal(out["on"], out["off"]) and torch.equal(out["again"], out["off"])
    eager, comp = inkling_probe.open(root / "eager"), inkling_probe.open(root / "compiled")
    extra = set(comp.keys()) - set(eager.keys())
    # transformers builds an explicit attention mask when it is compiling (and passes None eagerly)
    assert set(eager.keys()) <= set(comp.keys()) and all("attention_mask" in k for k in extra), extra
    assert sorted({r["step"] for r in comp.index}) == [0, 1]  # two forwards: steps 0 and 1 (steps="auto", traced)
    for key in eager.keys():
        torch.testing.assert_close(comp.tensor(key), eager.tensor(key), rtol=1e-5, atol=1e-6)


def test_sink_probes_trace_with_filters_steps_and_layout(tmp_path):
    def f(x):
        inkling_probe.probe("a", x * 2, token_dim=0)
        inkling_probe.probe("b.skip", x + 1)
        inkling_probe.probe("c", x.sum(0, keepdim=True), token_dim=None, kind="sum")
        return x * 3

    torch._dynamo.reset()
    count = Count()
    c = torch.compile(f, backend=count, fullgraph=True)  # fullgraph: a graph break would raise
    x = torch.arange(6.0).reshape(3, 2)
    with inkling_probe.recording(tmp_path / "d", exclude="*.skip", steps="1:"):
        for i in range(3):
            inkling_probe.step(dp_rank=i)
            assert torch.equal(c(x + i), (x + i) * 3)
    assert count.emits == [2]  # one compile, "b.skip" left no node
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == ["a", "c"] and d.steps("a") == [1, 2]
    assert torch.equal(d.tensor("a", step=2), (x + 2) * 2)
    row = d.rows("c", step=1)[0]
    assert row["meta"] == {"dp_rank": 1, "kind": "sum", "compiled": 1} and row["token_dim"] == -1

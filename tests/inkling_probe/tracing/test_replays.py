"""Recording under CUDA graphs (tracing/replays.py): the bracket's logic on the CPU, capture simulated.

A CPU run cannot capture a CUDA graph, so these tests make ``replays.capturing`` answer True for the
call that would capture: the copies into the slots then run at once, as the capture's first replay
would run them. What only a real capture shows (a replay drained with no Python run) is in
test_replays_cuda.py.
"""
import pytest
import torch

import inkling_probe
from inkling_probe.store.reader import as_dump
from inkling_probe.tracing import op, replays  # noqa: F401  (op: probes trace)


def snap(x):
    """A probed program: two probes and a step between calls made by the caller."""
    h = x * 2
    inkling_probe.probe("a", h)
    y = h.relu()
    inkling_probe.probe("b", y)
    return y


@pytest.fixture
def simulated(monkeypatch):
    """Capture simulated: ``capture[0] = True`` makes the next calls 'capture'; CPU tensors plannable."""
    capture = [False]
    monkeypatch.setattr(replays, "capturing", lambda x=None: capture[0])
    monkeypatch.setattr(replays, "plannable", lambda x: True)
    monkeypatch.setattr(replays, "_SETS", [])
    monkeypatch.setattr(replays, "_STAMPS", {})
    monkeypatch.setattr(replays, "_ALLOCATED", [0])
    return capture


def test_warm_up_records_capture_drains_each_step_once(simulated, tmp_path):
    """Warm-up recorded live, the capture's copies drained after the call with meta cudagraph, the
    values those of each call's own input, the step order kept."""
    c = torch.compile(snap, backend="aot_eager")
    run = replays.replayed(c)
    xs = [torch.linspace(-1, 1, 12).reshape(3, 4) + i for i in range(3)]
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.step()
        run(xs[0])  # warm-up: planned, recorded live
        simulated[0] = True
        inkling_probe.step()
        run(xs[1])  # capture: copied into the slots, drained after
        inkling_probe.step()
        run(xs[2])  # with Python running the kernel again, it is one more capture into the same set
    d = as_dump(tmp_path / "d")
    assert [(r["key"], r["step"]) for r in d.index] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    for step, x in enumerate(xs):
        assert torch.equal(torch.as_tensor(d.array("a", step=step)), x * 2)
        assert torch.equal(torch.as_tensor(d.array("b", step=step)), (x * 2).relu())
    metas = [r.get("meta") or {} for r in d.index]
    assert [m.get(replays.REPLAYED) for m in metas] == [None, None, 1, 1, 1, 1]
    assert all(m.get("compiled") == 1 for m in metas)
    assert run.replays.drained == 4


def test_steps_inside_the_compiled_call_are_kept_for_replays(simulated, tmp_path):
    """A step() inside the compiled program, met while capturing, is taken when the replay drains."""
    def stepped(x):
        inkling_probe.step(forward="prefill")
        return snap(x)

    run = replays.replayed(torch.compile(stepped, backend="aot_eager"))
    x = torch.ones(2, 3)
    with inkling_probe.recording(tmp_path / "d"):
        run(x)
        simulated[0] = True
        run(x + 1)
    d = as_dump(tmp_path / "d")
    assert [(r["key"], r["step"]) for r in d.index] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert all((r.get("meta") or {}).get("forward") == "prefill" for r in d.index)
    assert torch.equal(torch.as_tensor(d.array("a", step=1)), (x + 1) * 2)


def test_plan_only_records_nothing_and_takes_no_step(simulated, tmp_path):
    """record_compiled's warm-up calls: planned and captured, nothing recorded, no step taken."""
    def stepped(x):
        inkling_probe.step()
        return snap(x)

    bracket = replays.ReplayRecording(plan_only=True)
    c = torch.compile(stepped, backend="aot_eager")
    with inkling_probe.recording(tmp_path / "d"):
        with replays.calls(bracket):
            c(torch.ones(2))
        simulated[0] = True
        with replays.calls(bracket):
            c(torch.ones(2))
        bracket.plan_only = False
        with replays.calls(bracket):
            c(torch.full((2,), 3.0))
    d = as_dump(tmp_path / "d")
    assert [(r["key"], r["step"]) for r in d.index] == [("a", 0), ("b", 0)]
    assert torch.equal(torch.as_tensor(d.array("a", step=0)), torch.full((2,), 6.0))


def test_capture_without_a_bracket_is_refused_in_one_line(simulated, tmp_path):
    """A probe captured with nothing to drain its replays raises: a dump stopping at the warm-up would
    read as complete."""
    c = torch.compile(snap, backend="aot_eager")
    with inkling_probe.recording(tmp_path / "d"):
        c(torch.ones(2))
        simulated[0] = True
        with pytest.raises(replays.NotDrained, match="with nothing to drain its replays: record the compiled module"):
            c(torch.ones(2))


def test_capture_of_a_graph_whose_warm_up_was_not_seen_is_refused(simulated, tmp_path):
    c = torch.compile(snap, backend="aot_eager")
    with inkling_probe.recording(tmp_path / "d"):
        simulated[0] = True
        with pytest.raises(replays.NotDrained, match="whose warm-up this recording did not see"):
            replays.replayed(c)(torch.ones(2))


def test_over_budget_is_said_when_a_capture_needs_it(simulated, tmp_path, monkeypatch):
    """The budget is checked when slots are planned and said when a capture needs them: a program that
    never captures never pays it."""
    monkeypatch.setenv("INKLING_PROBE_GRAPH_MB", "0.0001")
    run = replays.replayed(torch.compile(snap, backend="aot_eager"))
    with inkling_probe.recording(tmp_path / "d"):
        run(torch.ones(64))
        run(torch.ones(64))  # eager again: no capture, no error
        simulated[0] = True
        with pytest.raises(replays.BudgetError, match="over the 0.00 MiB budget: raise INKLING_PROBE_GRAPH_MB"):
            run(torch.ones(64))


def test_capture_that_differs_from_its_warm_up_is_refused(simulated, tmp_path):
    shapes = {"n": 4}

    def changing(x):
        inkling_probe.probe("a", x * 2)
        inkling_probe.probe("b", torch.ones(shapes["n"]))
        return x

    run = replays.replayed(torch.compile(changing, backend="aot_eager", dynamic=False))
    with inkling_probe.recording(tmp_path / "d"):
        run(torch.ones(2))
        simulated[0] = True
        shapes["n"] = 5
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match="captured where the warm-up had 'b' \\(4,\\)"):
            run(torch.ones(2))


def test_uncompiled_and_unbracketed_programs_are_untouched(tmp_path):
    """No capture, no bracket: the op records as before (CPU tensors are never planned)."""
    c = torch.compile(snap, backend="aot_eager")
    run = replays.replayed(c)
    with inkling_probe.recording(tmp_path / "d"):
        c(torch.ones(2))
        run(torch.ones(2))
    assert len(as_dump(tmp_path / "d").index) == 4
    assert run.replays.drained == 0 and not run.replays.plans


def test_record_of_a_compiled_module_names_its_modules_and_brackets_its_calls(tmp_path, monkeypatch):
    """record(torch.compile(m)) records the keys record(m) records (no ``_orig_mod.``), each call bracketed;
    the bracket hooks are gone after the block."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        with inkling_probe.record(m, tmp_path / "eager"):
            m(x)
        c = torch.compile(m, backend="aot_eager")
        seen = []
        real = replays.ReplayRecording.before_call
        monkeypatch.setattr(replays.ReplayRecording, "before_call", lambda self: seen.append(1) or real(self))
        with inkling_probe.record(c, tmp_path / "compiled") as held:
            assert held is c
            c(x)
            c(x)
        assert not c._forward_pre_hooks and not c._forward_hooks
    eager, compiled = as_dump(tmp_path / "eager"), as_dump(tmp_path / "compiled")
    assert [r["key"] for r in compiled.index if r["step"] == 0] == [r["key"] for r in eager.index]
    assert sorted({r["step"] for r in compiled.index}) == [0, 1] and len(seen) == 2

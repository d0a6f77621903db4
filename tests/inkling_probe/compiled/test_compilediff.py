"""compilediff: a compiled-only fault named at its probe point, a benign compiled pair exits 0, and a
"compiled" side that ran eager is refused (one line, exit 2)."""
import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group
from inkling_probe.compiled.session import record_compiled

GRID = 192.0


def snap(x):
    """A model step that relies on eager's bf16 rounding of the sum (magic-number rounding to integers)."""
    h = x * 1.25
    inkling_probe.probe("layer.in", h)
    y = ((h * 1.7 + GRID) - GRID) * 0.5
    inkling_probe.probe("layer.snap", y)
    out = y + h
    inkling_probe.probe("layer.out", out)
    return out


X = torch.linspace(-4, 4, 256, dtype=torch.bfloat16).reshape(16, 16)


def _diff(*args):
    return CliRunner().invoke(group, ["compilediff", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("cd")
    with torch.no_grad(), inkling_probe.recording(root / "eager"):
        snap(X)
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        c = torch.compile(snap, backend=backend)
        record_compiled(lambda: c(X), root / backend, backend=backend)
    return root


def test_inductor_fusion_fault_named_at_its_op(dumps):
    out = _diff(dumps / "eager", dumps / "inductor")
    print(out.output)
    assert out.exit_code == 1
    assert "first divergent point: layer.snap at step 0" in out.output
    assert "compiled side: backend=inductor" in out.output and "0 graph breaks" in out.output


def test_benign_compiled_pair_exits_0(dumps):
    out = _diff(dumps / "eager", dumps / "aot_eager")
    assert out.exit_code == 0, out.output
    assert "compiled equals eager within what its dtype allows at every probe point: 3 tensors judged" in out.output


def test_compiled_side_that_ran_eager_is_refused(dumps, tmp_path):
    out = _diff(dumps / "inductor", dumps / "eager")
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert "ran eager: 3 of 3 tensors were recorded outside a compiled graph, graph breaks unknown" in out.output

    def broken(x):
        inkling_probe.probe("a", x * 2)
        torch._dynamo.graph_break()
        inkling_probe.probe("b", x * 3)
        return x

    torch._dynamo.reset()
    c = torch.compile(broken, backend="aot_eager")
    record_compiled(lambda: c(X), tmp_path / "broken", backend="aot_eager")
    out = _diff(dumps / "eager", tmp_path / "broken")
    assert out.exit_code == 2 and "graph breaks 1" in out.output, out.output
    assert _diff(tmp_path / "nope", dumps / "eager").output.strip() == f"Error: {tmp_path / 'nope'}: no such dump"


def test_points_one_side_lacks_are_refused_not_passed(dumps, tmp_path):
    """A leftover partial eager dump (1 key of 3) once read as an all-clear ("1 tensors judged")."""
    with torch.no_grad(), inkling_probe.recording(tmp_path / "partial", include="layer.in"):
        snap(X)
    out = _diff(tmp_path / "partial", dumps / "aot_eager")
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert "eager side" in out.output and "lacks 2 of the 3 probe points the compiled side recorded " \
        "(layer.snap@0, layer.out@0)" in out.output

    torch._dynamo.reset()
    c = torch.compile(snap, backend="aot_eager")
    record_compiled(lambda: c(X), tmp_path / "narrow", backend="aot_eager", include="layer.snap")
    out = _diff(dumps / "eager", tmp_path / "narrow")
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert "compiled side" in out.output and "lacks 2 of the 3 probe points the eager side recorded" in out.output

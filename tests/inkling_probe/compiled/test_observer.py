"""The observer effect, measured: a recording states whether it moved the compiled outputs, and a probe
set that moves nothing can be chosen (and is then stated as such)."""
import json

import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group
from inkling_probe.compiled.session import record_compiled

GRID = 192.0  # bf16's spacing at 192 is 1: (x + 192) - 192 rounds x to an integer, eagerly


def snap(x):
    """Round to integers the bf16 way: correct only where the sum is rounded to bf16 (eager; recorded)."""
    shifted = x * 1.7 + GRID
    inkling_probe.probe("snap.shifted", shifted)
    y = shifted - GRID
    inkling_probe.probe("snap.out", y)
    return y * 3


def test_inductor_recording_states_its_effect_and_the_dump_holds_the_compiled_bits(tmp_path):
    """Measured (torch 2.13 CPU): Inductor fuses the bf16 sum in fp32 (eager rounds it: outputs differ by
    up to 1.5), and a probe on the sum does not move the compiled outputs: Inductor stores the probed
    buffer and keeps computing from the fp32 value. The dump holds what the compiled program computed."""
    torch._dynamo.reset()
    c = torch.compile(snap, backend="inductor")
    x = torch.linspace(-4, 4, 64, dtype=torch.bfloat16)
    every = record_compiled(lambda: c(x), tmp_path / "every", backend="inductor")
    narrow = record_compiled(lambda: c(x), tmp_path / "narrow", backend="inductor", exclude="*.shifted")
    print(f"every probe: {every['observer']}\nshifted left out: {narrow['observer']}")
    assert every["observer"]["identical"] and narrow["observer"]["identical"]
    assert every["on"]["graph_breaks"] == 0 and narrow["on"]["graph_breaks"] == 0
    eager = snap(x) / 3
    recorded = inkling_probe.open(tmp_path / "every").tensor("snap.out")
    assert (recorded.float() - eager.float()).abs().max() >= 0.5  # compiled-only: not the eager rounding
    out = CliRunner().invoke(group, ["ls", str(tmp_path / "every")])
    assert out.exit_code == 0 and "observer effect: none (outputs with and without probes bit-identical" in out.output
    assert "compiled: backend=inductor; recorded run: 0 graph break(s)" in out.output
    out = CliRunner().invoke(group, ["ls", str(tmp_path / "narrow"), "--json"])
    got = json.loads(out.output)
    assert got["compiled"]["observer"]["identical"] is True and [t["key"] for t in got["tensors"]] == ["snap.out"]


def test_observer_line_states_a_move():
    from inkling_probe.compiled.observer import describe, effect

    obs = effect(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    assert not obs["identical"] and obs["differ"] == 1 and obs["max_abs"] == 0.5
    assert describe(obs).startswith("observer effect: recording moved the compiled outputs: 1 of 2 values differ")


def test_facts_of_an_aot_eager_recording_say_none(tmp_path):
    torch._dynamo.reset()
    c = torch.compile(snap, backend="aot_eager")
    x = torch.linspace(-4, 4, 64, dtype=torch.bfloat16)
    got = record_compiled(lambda: c(x), tmp_path / "d", backend="aot_eager")
    assert got["observer"]["identical"] and got["on"]["graph_breaks"] == 0
    assert torch.equal(inkling_probe.open(tmp_path / "d").tensor("snap.out"), torch.round(x * 1.7 + GRID) - GRID)

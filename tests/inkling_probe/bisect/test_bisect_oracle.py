"""The compare oracle's failures are errors, never verdicts (issue 23); rows compare could not check make a
run inconclusive, never passing nor failing (issue 41; tests/inkling_probe/bisect/test_bisect_inconclusive.py).
Runs are written in this process (the runner's command execution replaced)."""
import json

import pytest
import torch
from click.testing import CliRunner
from dumps import write

from inkling_probe.bisect import runner as runner_mod
from inkling_probe.bisect.flags import bisect_flags
from inkling_probe.bisect.oracle import CompareOracle, OracleError
from inkling_probe.bisect.runner import Command, Runner
from inkling_probe.bisect.state import State
from inkling_probe.bisect.toggles import Toggle
from inkling_probe.cli import group


def _steps(key="x", eps=0.0):
    """The runs differ from the reference within tolerance (eps), so no hash says "exact"."""
    one, p = torch.ones(4, 8) * (1 + eps), "" if key == "x" else f"{key}."  # another KEY: no name in common
    return [[(f"{p}embed", torch.arange(16.0).reshape(4, 4) * (1 + eps)), (f"{p}layers.0.x", one),
             (f"{p}layers.1.x", one * 2), (f"{p}logits", torch.ones(4, 3))]]


@pytest.fixture
def fake_runs(monkeypatch):
    """``KEY`` in the run's environment names the key it records (``x`` by default)."""
    calls = []

    def run(command, overrides, folder, record, timeout, on_start=None):
        settings = {k: overrides[v] for k, v in (("include", "INKLING_PROBE_INCLUDE"), ("mode", "INKLING_PROBE_MODE"))
                    if overrides.get(v)}
        write(folder / "dump", _steps(overrides.get("KEY") or "x", 1e-7), **settings)
        calls.append(folder.name)
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    monkeypatch.setattr(runner_mod, "_run", run)
    return calls


def _flags(tmp_path, toggles):
    ref = write(tmp_path / "ref", _steps())
    state = State(tmp_path / "w", "flags", {})
    return bisect_flags(Runner(state), CompareOracle(ref), Command("fake {dump}"), toggles)


def test_unchecked_rows_make_the_run_inconclusive(tmp_path, fake_runs):
    """A stats-only dump has no values to compare: compare exits 125 (could not check), and the oracle
    calls the run inconclusive; with every flag at BAD inconclusive there is no answer (before: "mode")."""
    toggles = [Toggle("mode", "INKLING_PROBE_MODE", "full", "stats"), Toggle("inert", "INERT", "0", "1")]
    ans = _flags(tmp_path, toggles)
    assert ans["failing_set"] is None and [t["trial"] for t in ans["inconclusive"]] == ["mode+inert"]
    assert "unchecked (unreadable)" in ans["inconclusive"][0]["why"]


def test_a_compare_error_is_an_error_not_a_divergence(tmp_path, fake_runs):
    toggles = [Toggle("key", "KEY", "x", "y"), Toggle("inert", "INERT", "0", "1")]
    with pytest.raises(OracleError, match="no key in common"):
        _flags(tmp_path, toggles)


def test_layers_with_a_map_that_does_not_load_runs_nothing(tmp_path, fake_runs):
    r = CliRunner().invoke(group, ["bisect", "layers", "--ref", "true", "--cand", "true", "--map",
                                   str(tmp_path / "nomap.toml"), "-w", str(tmp_path / "w")], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert "--map" in r.output and "nomap.toml" in r.output and len(r.output.strip().splitlines()) == 1
    assert fake_runs == [] and not (tmp_path / "w").exists()


def test_layers_stops_with_the_reason_when_compare_fails(tmp_path, fake_runs, monkeypatch):
    import inkling_probe.compare as compare_pkg

    def broken(*a, **k):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(compare_pkg, "compare", broken)
    r = CliRunner().invoke(group, ["bisect", "layers", "--ref", "true", "--cand", "true", "-w", str(tmp_path / "w")],
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output
    line = r.output.strip().splitlines()[-1]
    assert "compare could not judge" in line and "ZeroDivisionError: float division by zero" in line
    assert "first divergent layer" not in r.output


def test_flags_exit_3_with_the_reason(tmp_path, fake_runs):
    ref = write(tmp_path / "ref", _steps())
    r = CliRunner().invoke(group, ["bisect", "flags", "--cmd", "true", "--flag", "KEY=x:y", "--flag", "INERT=0:1",
                                   "--oracle", f"compare:{ref}", "-w", str(tmp_path / "w"), "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert "no key in common" in r.output.strip().splitlines()[-1]
    state = json.loads((tmp_path / "w" / "state.json").read_text())
    assert not any(v["passed"] is False and not v.get("crashed") for v in state["verdicts"].values())


def test_a_failed_reference_run_stops_layers_with_the_reason(tmp_path, fake_runs, monkeypatch):
    real = runner_mod._run

    def ref_fails_in_tests(command, overrides, folder, record, timeout, on_start=None):
        rec = real(command, overrides, folder, record, timeout, on_start)
        if command.text == "true ref" and overrides.get("INKLING_PROBE_INCLUDE"):
            rec.update(exit_code=1)
        return rec

    monkeypatch.setattr(runner_mod, "_run", ref_fails_in_tests)
    r = CliRunner().invoke(group, ["bisect", "layers", "--ref", "true ref", "--cand", "true cand", "-w", str(tmp_path / "w")],
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert "the ref run ref-layers.0 cannot be judged against: exit code 1" in r.output.strip().splitlines()[-1]

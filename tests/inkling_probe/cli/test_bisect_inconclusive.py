"""'Could not check' through the real CLI (issue 41 item 5): compare exits 125 when it found no
divergence but left rows unchecked, and bisect counts such a run as inconclusive, never as failing.

A tiny dump pair: ``twice`` records ``layers.1.x`` twice (compare cannot pair the calls: not
comparable), ``fault`` doubles ``layers.0.x``. Each bisect run is ``pick.py``, a small python script
(no torch) that copies the dump its toggles select; the exit oracle's runs also run ``inkling-probe
compare`` in a process of their own, so its exit status is what the oracle reads.
"""
import json
import sys

import pytest
import torch
from click.testing import CliRunner
from dumps import write

from inkling_probe.cli import group

PICK = """
import os, shutil, sys
name = "+".join(n for n in ("twice", "fault") if os.environ.get(n.upper()) == "1") or "clean"
shutil.copytree(os.path.join(os.environ["DUMPS"], name), sys.argv[1])
"""
REASON = "1 key row(s) unchecked (not comparable): layers.1.x@0"


def _steps(twice=False, fault=False):
    one = torch.ones(4, 8)
    out = [("embed", torch.arange(16.0).reshape(4, 4)), ("layers.0.x", one * (2 if fault else 1)),
           ("layers.1.x", one * 2)] + ([("layers.1.x", one * 2)] if twice else [])
    return [out + [("logits", torch.ones(4, 3))]]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    for name, kw in (("ref", {}), ("clean", {}), ("twice", {"twice": True}), ("fault", {"fault": True}),
                     ("twice+fault", {"twice": True, "fault": True})):
        write(root / name, _steps(**kw))
    (root / "pick.py").write_text(PICK)
    return root


def _invoke(args, env=None):
    return CliRunner().invoke(group, args, catch_exceptions=False, env=env)


def test_compare_exits_125_when_it_could_not_check_and_found_no_divergence(pair):
    r = _invoke(["compare", str(pair / "ref"), str(pair / "twice")])
    assert r.exit_code == 125 and "could not check" in r.output, r.output
    assert _invoke(["compare", str(pair / "ref"), str(pair / "twice+fault")]).exit_code == 1  # a divergence wins
    assert _invoke(["compare", str(pair / "ref"), str(pair / "fault")]).exit_code == 1
    assert _invoke(["compare", str(pair / "ref"), str(pair / "clean")]).exit_code == 0


def _flags(pair, tmp_path, monkeypatch, *oracle, shell=False, cmd=None):
    monkeypatch.setenv("DUMPS", str(pair))
    cmd = cmd or f"{sys.executable} {pair / 'pick.py'} {{dump}}"
    return _invoke(["bisect", "flags", "--cmd", cmd, *(["--shell"] if shell else []), "--flag", "TWICE=0:1",
                    "--flag", "FAULT=0:1", "--flag", "INERT=0:1", *oracle, "-w", str(tmp_path / "w")])


def test_flags_compare_oracle_exits_5_naming_the_inconclusive_trial(pair, tmp_path, monkeypatch):
    r = _flags(pair, tmp_path, monkeypatch, "--oracle", f"compare:{pair / 'ref'}")
    assert r.exit_code == 5, r.output
    assert "no minimal failing set" in r.output and f"inconclusive TWICE: {REASON}" in r.output
    assert "minimal failing set (" not in r.output  # before: "minimal failing set (1 of the flags): TWICE"
    assert "smallest set seen failing (not shown minimal): FAULT" in r.output
    assert "-> TWICE: INCONCLUSIVE" in r.output


def test_flags_exit_oracle_reads_compares_125_as_inconclusive(pair, tmp_path, monkeypatch):
    """The user's own command ends with the real `inkling-probe compare`: its 125 is the oracle's "could not
    check" (git bisect run's skip), its 1 a failure."""
    pick = f"{sys.executable} {pair / 'pick.py'} {{dump}}"
    compare = f"{sys.executable} -m inkling_probe.cli compare {pair / 'ref'} {{dump}} > /dev/null"
    r = _flags(pair, tmp_path, monkeypatch, "--json", shell=True, cmd=f"{pick} && {compare}")
    assert r.exit_code == 5, r.output
    doc = json.loads(r.output)
    assert doc["answer"]["failing_set"] is None and doc["answer"]["smallest_failing"] == ["FAULT"]
    assert doc["answer"]["inconclusive"] == [{"trial": "TWICE", "bad": ["TWICE"],
                                              "why": "exit code 125: the command could not check"}]
    (run,) = [x for x in doc["runs"] if x["inconclusive"]]
    assert run["exit_code"] == 125 and run["dir"].startswith("inconclusive/") and run["passed"] is False


def test_flags_without_the_unchecked_toggle_exits_0_as_before(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("DUMPS", str(pair))
    r = _invoke(["bisect", "flags", "--cmd", f"{sys.executable} {pair / 'pick.py'} {{dump}}", "--flag", "INERT=0:1",
                 "--flag", "FAULT=0:1", "--oracle", f"compare:{pair / 'ref'}", "-w", str(tmp_path / "w"), "--json"])
    assert r.exit_code == 0, r.output
    answer = json.loads(r.output)["answer"]
    assert answer["failing_set"] == ["FAULT"] and answer["inconclusive"] == []


PRECISION = """
import os, shutil, sys
kept = {int(x) for x in os.environ["INKLING_BF16_LAYERS"].split(",") if x}
name = "clean" if kept == {0, 1} else "twice" if kept == {1} else "fault"
shutil.copytree(os.path.join(os.environ["DUMPS"], name), sys.argv[1])
"""


def test_precision_exits_5_instead_of_answering_a_set_one_layer_too_big(pair, tmp_path, monkeypatch):
    """Layer 1 must stay at reference precision; keeping it without layer 0 cannot be checked. Before,
    that trial failed and the answer was 0,1, exit 0 (as measured on the model: 3,4 for 4)."""
    script = tmp_path / "precision.py"
    script.write_text(PRECISION)
    monkeypatch.setenv("DUMPS", str(pair))
    r = _invoke(["bisect", "precision", "--cmd", f"{sys.executable} {script} {{dump}}", "--layers", "0-1",
                 "--oracle", f"compare:{pair / 'ref'}", "-w", str(tmp_path / "w")])
    assert r.exit_code == 5, r.output
    assert f"inconclusive ref-1: {REASON}" in r.output and "must stay at reference precision" not in r.output
    assert "smallest set seen passing (not shown minimal): INKLING_BF16_LAYERS=0,1" in r.output


def test_layers_exits_5_when_the_first_divergence_rests_on_an_inconclusive_layer(tmp_path, monkeypatch):
    """The CLI of bisect layers with the runs written in this process: layer 5 cannot be checked, layer 6
    diverges."""
    from inkling_probe.bisect import runner as runner_mod

    def run(command, overrides, folder, record, timeout, on_start=None):
        side = command.text.split()[-1]
        g = torch.Generator().manual_seed(0)
        x, out = torch.randn(8, 32, generator=g), []
        for i in range(8):
            x = x + 0.1 * torch.randn(8, 32, generator=g) + (1.0 if side == "cand" and i == 6 else 0.0)
            out += [(f"layers.{i}.mlp", x), (f"layers.{i}.resid", x.clone())]
            out += [(f"layers.{i}.resid", x.clone())] if side == "cand" and i == 5 else []
        settings = {k: overrides[v] for k, v in (("include", "INKLING_PROBE_INCLUDE"), ("mode", "INKLING_PROBE_MODE"))
                    if overrides.get(v)}
        write(folder / "dump", [out], **settings)
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    monkeypatch.setattr(runner_mod, "_run", run)
    r = _invoke(["bisect", "layers", "--ref", "true ref", "--cand", "true cand", "-w", str(tmp_path / "w")])
    assert r.exit_code == 5, r.output
    assert "no first divergent layer" in r.output and "inconclusive layers.5: " in r.output
    assert "known: passes through layers.4, fails at layers.6" in r.output
    assert not any(line.startswith("first divergent layer") for line in r.output.splitlines())
    assert f"{tmp_path / 'w'}/inconclusive" in r.output.splitlines()[-1]

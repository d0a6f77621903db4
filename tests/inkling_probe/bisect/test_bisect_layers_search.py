"""LayerSearch on synthetic dumps written in this process (the runner's command execution replaced):
the binary search, its bound, the non-finite bound from the stats runs, and resume after a stop."""
import math

import pytest
import torch
from dumps import write

from inkling_probe.bisect import runner as runner_mod
from inkling_probe.bisect.layers import LayerSearch
from inkling_probe.bisect.runner import BudgetSpent, Command, Runner
from inkling_probe.bisect.state import State

L = 12


def _tensors(side: str, born: int, nan: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, generator=g)
    out = [("embed", x)]
    for i in range(L):
        x = x + 0.1 * torch.randn(8, 32, generator=g)
        if side == "cand" and i == born:
            x = x * float("nan") if nan else x + 1.0
        out += [(f"layers.{i}.mlp", x), (f"layers.{i}.resid", x.clone())]
    return out + [("logits", x.sum(-1, keepdim=True))]


@pytest.fixture
def fake_runs(monkeypatch):
    calls = []

    def run(command, overrides, folder, record, timeout, on_start=None):
        side, born, nan = command.text.split(":")
        settings = {k: overrides[v] for k, v in (("include", "INKLING_PROBE_INCLUDE"), ("mode", "INKLING_PROBE_MODE"))
                    if overrides.get(v)}
        write(folder / "dump", [_tensors(side, int(born), nan == "nan")], **settings)
        calls.append(folder.name)
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    monkeypatch.setattr(runner_mod, "_run", run)
    return calls


def _search(tmp_path, born, nan=False, max_runs=None):
    state = State(tmp_path / "w", "layers", {"born": born, "nan": nan})
    sides = {"ref": Command(f"ref:{born}:{nan and 'nan'}"), "cand": Command(f"cand:{born}:{nan and 'nan'}")}
    return LayerSearch(Runner(state, max_runs=max_runs), sides, {}).run(), state


@pytest.mark.parametrize("born", [0, 5, 11, 99])
def test_finds_the_born_layer_within_the_bound(tmp_path, fake_runs, born):
    ans, _ = _search(tmp_path, born)
    assert ans["layer"] == (f"layers.{born}" if born < L else None)
    assert ans["runs_per_side"] <= math.ceil(math.log2(L)) + 2 == ans["bound"]
    if born < L:
        assert ans["first_divergence"] == f"layers.{born}.mlp"


def test_nonfinite_stats_bound_the_search(tmp_path, fake_runs):
    ans, _ = _search(tmp_path, 1, nan=True)
    assert ans["layer"] == "layers.1" and ans["nonfinite_onset"] == "layers.1"
    assert ans["runs_per_side"] == 3  # stats, layer 0, layer 1 (the bound confirmed); 5 without the stats bound


def test_stopped_then_resumed_redoes_nothing(tmp_path, fake_runs):
    with pytest.raises(BudgetSpent):
        _search(tmp_path, 5, max_runs=5)
    assert len(fake_runs) == 5
    ans, state = _search(tmp_path, 5)
    assert ans["layer"] == "layers.5"
    assert len(fake_runs) == len(state.runs) and state.resumed_runs == 5
    assert not (tmp_path / "w" / "pending").exists()

"""bisect layers agrees with the full compare of the same runs (issue 22 item 3).

Synthetic routed runs (the runner's command execution replaced, dumps written in this process, the
INKLING_PROBE_INCLUDE of each trial honoured): a reference, a benign control and candidate (small
noise), optionally a near-tie routing flip at layer F (the flipped token takes other experts: its own
rows differ from there on, and compare sets them aside downstream) and a planted error born at layer G.
The property: the layer bisect names is the layer of the full compare's first divergence (none when
the full compare passes), and its culprit the full compare's. Without the carried keys a trial of a
layer after F sees the flipped tokens' values with no routing change before them and flags them.
"""
import math

import numpy as np
import pytest
import torch
from dumps import write

from inkling_probe.bisect import runner as runner_mod
from inkling_probe.bisect.carry import layer_of
from inkling_probe.bisect.layers import LayerSearch
from inkling_probe.bisect.runner import Command, Runner
from inkling_probe.bisect.state import State
from inkling_probe.compare import compare

L, T, H, E, TOK = 6, 16, 32, 8, 9


def _steps(side: str, flip, fault, tok: int = TOK):
    rng = np.random.default_rng(0)
    noise = np.random.default_rng({"ref": 1, "cand": 2, "ctl": 3}[side])
    scale = {"ref": 0.0, "cand": 0.003, "ctl": 0.004}[side]

    def t(a):
        return torch.tensor(np.asarray(a, np.float32))

    def noisy(a, i=None):
        broken = side == "cand" and fault is not None and i is not None and i > fault
        return a * (1 + scale * noise.standard_normal(a.shape)) * (1.5 if broken else 1.0)  # the error persists

    x = rng.standard_normal((T, H))
    out = [("embed", t(noisy(x)))]
    for i in range(L):
        x = x + 0.1 * rng.standard_normal((T, H))
        out.append((f"layers.{i}.attn_norm", t(noisy(x, i))))
        logits = rng.standard_normal((T, E))
        logits[tok] = [1.0, 0.95, 0.90, -3, -3, -3, -3, -3]  # token tok: experts 1 and 2 nearly tied
        lg = noisy(logits, i)
        if side == "cand" and flip == i:
            lg[tok, 1], lg[tok, 2] = 0.90, 0.96  # the near-tie flips towards expert 2
        ids = np.argsort(-lg, axis=1)[:, :2]
        out.append((f"layers.{i}.mlp.router_logits", t(lg)))
        out.append((f"layers.{i}.mlp.topk_idx", torch.tensor(ids),
                    {"kind": "decision", "scores": f"layers.{i}.mlp.router_logits"}))
        y = x + 0.2 * rng.standard_normal((T, H))
        y = noisy(y, i)
        if side == "cand" and flip is not None and i >= flip:
            y[tok] += 1.0  # the flipped token took other experts: its own row differs from here on
        if side == "cand" and fault == i:
            y = y * 1.5  # an error born in layer i's experts
        out.append((f"layers.{i}.mlp.experts", t(y)))
        out.append((f"layers.{i}.resid", t(y)))
    return [out + [("logits", t(noisy(x[:, :8], L)))]]


@pytest.fixture
def fake_runs(monkeypatch):
    def run(command, overrides, folder, record, timeout, on_start=None):
        side, flip, fault, tok = command.text.split(":")
        settings = {k: overrides[v] for k, v in (("include", "INKLING_PROBE_INCLUDE"), ("mode", "INKLING_PROBE_MODE"))
                    if overrides.get(v)}
        write(folder / "dump", _steps(side, _int(flip), _int(fault), int(tok)), **settings)
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    monkeypatch.setattr(runner_mod, "_run", run)


def _int(text):
    return None if text == "-" else int(text)


def _random_cases(n: int, seed: int = 7):
    """Flip and fault layers (or none: L and L+1 stand for none) and the flipped token, drawn at random."""
    rng = np.random.default_rng(seed)
    name = lambda i: str(i) if i < L else "-"  # noqa: E731
    return [(name(f), name(g), int(t)) for f, g, t in zip(rng.integers(0, L + 2, n), rng.integers(0, L + 2, n),
                                                          rng.integers(2, T - 2, n))]


CASES = [("-", "-", TOK), ("1", "-", TOK), ("2", "-", TOK), ("1", "3", TOK), ("-", "4", TOK), ("3", "5", TOK),
         ("-", "0", TOK)] + _random_cases(8)


@pytest.mark.parametrize("flip,fault,tok", CASES)
def test_bisect_layers_names_what_the_full_compare_names(tmp_path, fake_runs, flip, fault, tok):
    full = {side: write(tmp_path / side, _steps(side, _int(flip), _int(fault), tok)) for side in ("ref", "cand", "ctl")}
    rep = compare(full["ref"], full["cand"], full["ctl"], explain=False)
    first = rep.first_divergence
    want = None if first is None else f"layers.{max(layer_of(first.key) or 0, 0)}"
    state = State(tmp_path / "w", "layers", {"flip": flip, "fault": fault})
    sides = {name: Command(f"{side}:{flip}:{fault}:{tok}") for name, side in (("ref", "ref"), ("cand", "cand"),
                                                                             ("control", "ctl"))}
    ans = LayerSearch(Runner(state), sides, {}).run()
    assert ans["layer"] == want, (ans, first and first.key)
    if want is not None:
        assert ans["first_divergence"] == first.key and ans["culprit"] == rep.culprit.key
    assert ans["runs_per_side"] <= math.ceil(math.log2(L)) + 2


def test_the_cases_need_the_carried_routing(tmp_path):
    """The benign flip is set aside by the full compare, and flagged when its layer is compared alone."""
    full = {side: write(tmp_path / side, _steps(side, 1, None)) for side in ("ref", "cand", "ctl")}
    assert not compare(full["ref"], full["cand"], full["ctl"], explain=False).diverged
    alone = compare(full["ref"], full["cand"], full["ctl"], explain=False, include=["layers.2.*"])
    assert alone.diverged

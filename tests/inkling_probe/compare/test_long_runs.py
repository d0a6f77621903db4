"""Long runs (issue 26): compare's work per key does not grow with the number of steps recorded;
the indexes that replaced scans find what the scans found."""
import itertools

import torch

from inkling_probe.compare import compare, divergence, routing

from dumps import write


def _run(tmp_path, name, steps):
    gen = torch.Generator().manual_seed(0)
    items = lambda noise: [[(f"layers.{k}.w", torch.randn(1, 8, generator=gen) * (1 + noise)) for k in range(4)]
                           for _ in range(steps)]
    return write(tmp_path / f"{name}-ref", items(0.0)), write(tmp_path / f"{name}-cand", items(1e-3))


def test_routing_lookups_per_key_stay_flat_as_steps_grow(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = routing.layer_of

    def counting(key):
        calls["n"] += 1
        return real(key)

    monkeypatch.setattr(routing, "layer_of", counting)
    per_row = []
    for steps in (4, 32):
        ref, cand = _run(tmp_path, f"s{steps}", steps)
        calls["n"] = 0
        rep = compare(ref, cand, explain=False, jobs=1)
        per_row.append(calls["n"] / len(rep.rows))
    assert per_row[1] <= per_row[0] + 1, per_row  # a scan of every entry per key: ~8x more


def test_recorded_inputs_index_matches_the_prefix_rule():
    keys = ["a", "a.in.0", "a.in.b", "a.in.b.in.0", "a.inx.0", "b.in.a.in.0", "a.b", "a.b.in.1", "ain.0"]
    for parent, key in itertools.product(keys, keys):
        assert (parent in divergence._parents(key)) == key.startswith(parent + ".in."), (parent, key)

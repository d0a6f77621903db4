"""Long runs (issue 26): compare's work per key does not grow with the number of steps recorded;
the indexes that replaced scans find what the scans found."""
import itertools

import torch

from inkling_probe.compare import compare, divergence, engine

from dumps import write


def _run(tmp_path, name, steps):
    gen = torch.Generator().manual_seed(0)
    items = lambda noise: [[(f"layers.{k}.w", torch.randn(1, 8, generator=gen) * (1 + noise)) for k in range(4)]
                           for _ in range(steps)]
    return write(tmp_path / f"{name}-ref", items(0.0)), write(tmp_path / f"{name}-cand", items(1e-3))


def test_routing_lookups_per_key_stay_flat_as_steps_grow(tmp_path, monkeypatch):
    """Entries visited per compared key: an index built once, not a scan of every entry per key."""
    visits = {"n": 0}

    class Counting(dict):
        def items(self):
            for kv in super().items():
                visits["n"] += 1
                yield kv

    real = engine._filtered
    monkeypatch.setattr(engine, "_filtered", lambda *a: Counting(real(*a)))
    per_row = []
    for steps in (4, 32):
        ref, cand = _run(tmp_path, f"s{steps}", steps)
        visits["n"] = 0
        rep = compare(ref, cand, explain=False, jobs=1)
        per_row.append(visits["n"] / len(rep.rows))
    assert per_row[1] <= per_row[0] + 1, per_row  # a scan per key: ~8x more at 32 steps than at 4


def test_recorded_inputs_index_matches_the_prefix_rule():
    keys = ["a", "a.in.0", "a.in.b", "a.in.b.in.0", "a.inx.0", "b.in.a.in.0", "a.b", "a.b.in.1", "ain.0"]
    for parent, key in itertools.product(keys, keys):
        assert (parent in divergence._parents(key)) == key.startswith(parent + ".in."), (parent, key)


def test_cache_feeders_by_bisection_match_the_scan():
    """steps.link_cache finds the first and the last earlier step by bisection when steps rise (it
    scanned every earlier step a row: quadratic over a long run), and the layer's worst earlier row by a
    running maximum; any order gives the scan's answer."""
    import random

    from inkling_probe.compare import steps

    class R:
        def __init__(self, i, step, layer, score):
            self.key, self.step, self.call, self.layer, self.cache_feeders = f"k{i}", step, 0, layer, []
            self.score = score

    def scan(rows):  # the definition: the first and the last step seen before, among those below, and
        order, by = [], {}  # the layer's highest-scoring row of any step below (the first seen on a tie)
        for r in rows:
            if r.layer is None:
                continue
            if r.step not in order:
                order.append(r.step)
            earlier = [s for s in order if s < r.step]
            if earlier:
                picked = sorted({earlier[0], earlier[-1]})
                r.cache_feeders = [x.ident for s in picked for x in by.get(s, {}).get(r.layer, [])]
                below = [x for s in earlier for x in by.get(s, {}).get(r.layer, [])]
                if below:
                    worst = max(below, key=lambda x: x.score).ident
                    r.cache_feeders += [] if worst in r.cache_feeders else [worst]
            r.ident = (r.key, r.step, r.call)
            by.setdefault(r.step, {}).setdefault(r.layer, []).append(r)

    rnd = random.Random(0)
    for trial in range(200):
        spec = [(rnd.randint(0, 8), rnd.choice([None, 0, 1]), rnd.choice([0.0, 0.5, 2.0, rnd.random() * 9]))
                for _ in range(rnd.randint(1, 40))]
        if trial % 2:
            spec.sort(key=lambda x: x[0])
        a, b = [R(i, *x) for i, x in enumerate(spec)], [R(i, *x) for i, x in enumerate(spec)]
        scan(a)
        steps.link_cache(b)
        assert [x.cache_feeders for x in a] == [x.cache_feeders for x in b]

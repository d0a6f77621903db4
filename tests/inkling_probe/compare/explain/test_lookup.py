"""explain's positionless_lookup: sums of table rows that ignore the position (per-position
offsets dropped) are named from the recorded integer input and both outputs."""
import numpy as np

from inkling_probe.compare.explain import explain

B, V, D = 6, 8, 32


def _case(ids, cand_offsets, seed=0):
    table = np.random.default_rng(seed).standard_normal((B * V, D))
    ref = table[ids + np.arange(B) * V].sum(1)  # [N, D]: position b reads codebook b
    cand = table[ids + np.asarray(cand_offsets)].sum(1)
    return ref, cand


def _ids(n=8, seed=0, shuffled=True):
    g = np.random.default_rng(seed)
    ids = g.integers(0, 3, (n, B))  # few values: rows share multisets
    if shuffled:
        ids[n // 2:] = g.permuted(ids[: n // 2], axis=1)  # the same values in another order
    return ids


def _found(ref, cand, ids, noise=1e-6):
    return {f.name: f for f in explain(ref, cand, noise=noise, inputs={"0": ids})}


def test_dropped_offsets_named():
    ids = _ids()
    f = _found(*_case(ids, np.zeros(B, int)), ids)["positionless_lookup"]
    assert f.evidence["rank"] < len(ids) and f.evidence["residual_rel_rms"] < 1e-9
    assert f.evidence["ref_residual_rel_rms"] > 1e-2 and "ignores the position" in f.summary


def test_other_offsets_are_not_positionless():
    ids = _ids()
    ref, cand = _case(ids, np.arange(B) * V + 1)  # each index one row off: still per position
    assert "positionless_lookup" not in _found(ref, cand, ids)


def test_no_dependent_rows_no_claim():
    """As many independent rows as values: any output fits, so nothing is claimed."""
    ids = np.random.default_rng(1).integers(0, V, (3, B))
    ids[:, 0] = [0, 1, 2]
    ref, cand = _case(ids, np.zeros(B, int))
    assert "positionless_lookup" not in _found(ref, cand, ids)


def test_a_further_error_is_not_explained():
    ids = _ids()
    ref, cand = _case(ids, np.zeros(B, int))
    cand[1] += 0.1
    assert "positionless_lookup" not in _found(ref, cand, ids)


def test_float_inputs_are_not_ids():
    ids = _ids()
    ref, cand = _case(ids, np.zeros(B, int))
    assert "positionless_lookup" not in _found(ref, cand, ids.astype(np.float32))


def test_rows_that_do_not_vary_are_not_a_lookup():
    """A candidate of zeros, or of one row repeated, fits any table trivially (every row holds as many
    values, so a constant row is in K's span): no lookup is claimed for it."""
    ids = _ids()
    ref, _ = _case(ids, np.zeros(B, int))
    for cand in (np.zeros_like(ref), np.tile(ref[0], (len(ref), 1))):
        assert "positionless_lookup" not in _found(ref, cand, ids)


def test_a_fit_too_large_is_not_tried(monkeypatch):
    """K [rows, values] is dense float64 and fitted by SVD: rows x values is capped (a long clip of many
    levels would take gigabytes and minutes inside compare); over the cap nothing is claimed."""
    from inkling_probe.compare.explain import lookup

    ids = _ids()
    ref, cand = _case(ids, np.zeros(B, int))
    assert "positionless_lookup" in _found(ref, cand, ids)
    monkeypatch.setattr(lookup, "MAX_COUNTS", len(ids) * 3 - 1)  # 3 values here
    assert "positionless_lookup" not in _found(ref, cand, ids)


def test_rows_without_per_row_sums_do_not_crash(monkeypatch):
    """A row dim longer than the stats' per-index limit has no per-row sums: the changed rows come from
    the rows at hand (it raised TypeError: None > float)."""
    from inkling_probe.compare.explain import stats

    ids = _ids()
    ref, cand = _case(ids, np.zeros(B, int))
    want = _found(ref, cand, ids)["positionless_lookup"].evidence["rows"]
    monkeypatch.setattr(stats, "MAX_INDEX", len(ids) - 1)
    assert _found(ref, cand, ids)["positionless_lookup"].evidence["rows"] == want and want


def test_a_constant_offset_is_not_a_lookup():
    """A reference that depends on the position only a little, and a candidate that is it plus a large
    constant vector (a bias fault): the offset is in K's span and dwarfs the residual when measured
    against the rows' size; against their variation it does not fit (it was claimed at noise 1e-2)."""
    ids = _ids()
    g = np.random.default_rng(1)
    shared, pos = g.standard_normal((V, D)), g.standard_normal((B * V, D))
    ref = shared[ids].sum(1) + 0.2 * pos[ids + np.arange(B) * V].sum(1)
    cand = ref + g.standard_normal(D) * 12 * np.sqrt((ref ** 2).mean())
    assert "positionless_lookup" not in _found(ref, cand, ids, noise=1e-2)

"""The compiled one-pass reduction (compare/fused.py) against the numpy pass it replaces on large
tensors: the same counts and indices exactly, the same sums to the last few ulps, the same fallback
for NaN/Inf, and the same row sums in the metrics' pass and the separate row pass."""
import math

import numpy as np
import pytest

from inkling_probe.compare import fused, metrics
from inkling_probe.compare.measure import errors_from_sums, row_errors_and_scale
from inkling_probe.compare.values import CHUNK, Values

pytest.importorskip("numba")


def _both(monkeypatch, r, c, atol, rtol, td, columns=True):
    """(numpy pass, compiled pass) results of metrics.reduce_values on the same pair."""
    with monkeypatch.context() as m:
        m.setattr(fused, "MIN_VALUES", 1 << 62)  # every tensor below it: the numpy pass
        slow = metrics.reduce_values(r, c, atol, rtol, td, columns=columns)
    fast = metrics.reduce_values(r, c, atol, rtol, td, columns=columns)
    return slow, fast


def _pair(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(shape).astype(dtype)
    c = (r + 1e-3 * rng.standard_normal(shape)).astype(dtype)
    c.reshape(-1)[::997] = r.reshape(-1)[::997]  # some exact positions: mismatch < 1
    return r, c


def _same(a: metrics.Metrics, b: metrics.Metrics, ulps: float = 1e-13):
    da, db = a.to_dict(), b.to_dict()
    for k, x in da.items():
        y = db[k]
        if isinstance(x, float) and math.isfinite(x) and x != y:
            assert abs(x - y) <= ulps * abs(x), (k, x, y)
        else:
            assert x == y or (x != x and y != y), (k, x, y)


@pytest.mark.parametrize("shape, td", [((1, 300, 4096), 1), ((CHUNK + 77,), None), ((700, 1000), 0),
                                       ((3, 2 ** 18), None), ((3, 600000), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_pass_measures_as_the_numpy_pass(monkeypatch, shape, td, dtype):
    assert fused.kernel() is not None
    r, c = _pair(shape, dtype)
    (ms, ss), (mf, sf) = _both(monkeypatch, r, c, 1e-4, 1e-3, td)
    assert ms.numel >= fused.MIN_VALUES
    assert 0 < mf.outside < 1 and 0 < mf.mismatch < 1  # the counts are exercised, not trivially 0 or all
    _same(ms, mf)
    assert (ss is None) == (sf is None)
    if ss is not None:
        np.testing.assert_allclose(sf.per, ss.per, rtol=1e-12)
        np.testing.assert_allclose(sf.own, ss.own, rtol=1e-12)
        assert (ss.cols is None) == (sf.cols is None)
        if ss.cols is not None:
            np.testing.assert_allclose(sf.cols, ss.cols, rtol=1e-12)


def test_counts_on_the_tolerance_edge_are_exact(monkeypatch):
    """|d| exactly at atol + rtol |r| is within (not outside), as in the numpy pass."""
    n = CHUNK * 2
    r = np.full(n, 2.0, dtype=np.float32)
    c = r.copy()
    c[::3] = 2.5  # |d| = 0.5 = 0.1 + 0.2 * 2: exactly at the tolerance
    c[1::3] = 2.75  # outside
    (ms, _), (mf, _) = _both(monkeypatch, r, c, 0.1, 0.2, None)
    assert mf.outside == ms.outside == pytest.approx(1 / 3, abs=1e-6)
    assert mf.mismatch == ms.mismatch


def test_first_largest_difference_wins_across_chunks(monkeypatch):
    n = CHUNK * 3
    r = np.zeros(n, dtype=np.float32)
    c = r.copy()
    c[[5, CHUNK + 9, 2 * CHUNK + 1]] = 3.0  # three equal maxima: the first is named
    (ms, _), (mf, _) = _both(monkeypatch, r, c, 0.0, 0.0, None)
    assert mf.max_abs_index == ms.max_abs_index == [5]


def test_a_chunk_with_nan_or_inf_is_measured_the_general_way(monkeypatch):
    r, c = _pair((6, CHUNK // 2), np.float32)  # 3 chunks of 2 rows
    c[2, 11] = np.nan  # candidate NaN where the reference is finite, in the middle chunk
    r[5, 3] = c[5, 3] = np.inf  # the same Inf on both sides: no divergence
    (ms, ss), (mf, sf) = _both(monkeypatch, r, c, 1e-4, 1e-3, 0)
    assert mf.nonfinite_mismatch == 1 and mf.cand_nan == 1 and mf.ref_inf == 1
    assert mf.max_abs_index == [2, 11] and mf.rel_rms == math.inf
    _same(ms, mf)
    np.testing.assert_allclose(sf.per, ss.per, rtol=1e-12)
    np.testing.assert_array_equal(sf.per[2:], ss.per[2:])  # the general way for the NaN's and Inf's chunks


def test_row_pass_equals_the_metrics_row_sums_bit_for_bit():
    r, c = _pair((1, 200, 6144), np.float32)
    r[0, 150, 2] = c[0, 150, 2] = np.nan
    _, sums = metrics.compare_with_rows(r, c, 1e-4, 1e-3, 1)
    for a, b in zip(errors_from_sums(*sums), row_errors_and_scale(Values(r, "float32"), Values(c, "float32"), 1)):
        assert np.array_equal(a, b)


def test_without_numba_the_numpy_pass_does_everything(monkeypatch):
    import sys

    r, c = _pair((CHUNK,), np.float32)
    want = metrics.compare_tensors(r, c, 1e-4, 1e-3)
    fused.kernel.cache_clear()
    import inkling_probe.compare

    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.delitem(sys.modules, "inkling_probe.compare.fused_kernel", raising=False)
    monkeypatch.delattr(inkling_probe.compare, "fused_kernel", raising=False)
    try:
        assert fused.kernel() is None and not metrics._Acc(CHUNK).compiled
        got = metrics.compare_tensors(r, c, 1e-4, 1e-3)
    finally:
        fused.kernel.cache_clear()
    _same(want, got)


def test_a_pass_that_fails_to_compile_hands_the_chunk_to_the_numpy_pass(monkeypatch):
    """numba failing at a call (a full disk under its cache, an unreadable cache file, a signature
    it cannot compile) is not a traceback: the chunk is measured the numpy way, and the compiled
    pass stays off for the process."""
    r, c = _pair((3, CHUNK), np.float32)
    with monkeypatch.context() as m:
        m.setattr(fused, "MIN_VALUES", 1 << 62)
        want = metrics.reduce_values(r, c, 1e-4, 1e-3, 0)
    calls = []

    def broken(*a):
        calls.append(1)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fused, "kernel", lambda: broken)
    monkeypatch.setattr(fused, "_NO_KERNEL", [])
    got = metrics.reduce_values(r, c, 1e-4, 1e-3, 0)
    assert calls == [1] and not fused.on()  # tried once, then off
    assert got[0].to_dict() == want[0].to_dict()
    np.testing.assert_array_equal(got[1].per, want[1].per)


def test_small_and_other_dtypes_keep_the_numpy_pass():
    assert not fused.usable(np.zeros(4, np.float16), np.zeros(4, np.float16))
    assert not fused.usable(np.zeros(4, np.int32), np.zeros(4, np.int32))
    assert not fused.usable(np.zeros((4, 2), np.float32)[:, 0], np.zeros(4, np.float32))
    assert fused.usable(np.zeros(4, np.float32), np.zeros(4, np.float64))


def test_the_same_values_at_any_address_measure_the_same_bits():
    """The vectorized loop's order does not depend on where the buffers lie (a streamed pair's
    scratch buffers and a loaded array sit at different alignments)."""
    r, c = _pair((CHUNK + 5,), np.float32, seed=3)
    want = metrics.reduce_values(r, c, 1e-4, 1e-3, None)[0].to_dict()
    for shift in (1, 2, 3):
        rb, cb = np.empty(r.size + shift, np.float32), np.empty(c.size + 2 * shift, np.float32)
        rb[shift:], cb[2 * shift: 2 * shift + c.size] = r, c
        got = metrics.reduce_values(rb[shift:], cb[2 * shift: 2 * shift + c.size], 1e-4, 1e-3, None)[0]
        assert got.to_dict() == want, shift


def test_a_float64_difference_whose_square_overflows_is_an_infinite_error():
    """The reference's squares finite, the difference's not (found in review: log10(0) raised)."""
    r, c = np.zeros(CHUNK), np.zeros(CHUNK)
    r[3], c[3] = 1e154, -1e154
    m = metrics.compare_tensors(r, c)
    assert m.rel_rms == math.inf and m.sqnr_db == -math.inf and m.error() == math.inf


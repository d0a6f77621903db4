"""The compiled loop of compare/fused.py (imported only when numba is there; see that module).

Vectorized: the four float64 sums may be reassociated by the compiler (``fastmath={"reassoc"}``
and nothing else: no NaN/Inf assumptions, no FMA contraction), so a run of values is summed in
SIMD lanes. The maxima are taken on the bit patterns of the non-negative float64 values (ordered as
int64 exactly as the values are), an integer max the compiler vectorizes where a float max would
not; the index of the largest difference is found by a second look at a run whose maximum beats
the best so far (rare after the first runs). The compiled code is fixed for a machine, so a pair
measures the same in every process of it (streamed or loaded, any ``--jobs``); another CPU's vector
width may sum in another order (last bits), as the BLAS dot products before it did.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from inkling_probe.compare.values import BLOCK  # values summed in one run


@intrinsic
def _bits(typingctx, x):
    """The int64 bit pattern of a float64 (for x >= 0 it orders as x does)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _value(typingctx, x):
    """The float64 whose bit pattern is the int64 ``x``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@numba.njit(cache=True, nogil=True, boundscheck=False, fastmath={"reassoc"})
def _run(r, c, lo, hi, atol, rtol):  # pragma: no cover (compiled)
    """Sums over the values [lo, hi): (rr, cc, rc, dd, max |d| bits, max |r| bits, outside, unequal)."""
    t_rr = t_cc = t_rc = t_dd = 0.0
    m_d = m_r = 0
    outside = unequal = 0
    rs, cs = r[lo:hi], c[lo:hi]  # indices from 0: no negative-index wrap to check, so the loop vectorizes
    for j in range(rs.size):
        x = np.float64(rs[j])
        y = np.float64(cs[j])
        d = y - x
        t_rr += x * x
        t_cc += y * y
        t_rc += x * y
        t_dd += d * d
        ad = abs(d)
        ax = abs(x)
        m_d = max(m_d, _bits(ad))
        m_r = max(m_r, _bits(ax))
        outside += np.int64(ad > atol + rtol * ax)
        unequal += np.int64(d != 0.0)
    return t_rr, t_cc, t_rc, t_dd, m_d, m_r, outside, unequal


@numba.njit(cache=True, nogil=True, boundscheck=False)
def reduce_chunk(r, c, width, per, own, cols, col_rows, atol, rtol):  # pragma: no cover (compiled)
    """Sums over one chunk (compare/fused.py). ``r``, ``c``: [n] values; ``width``: values a row
    holds (the chunk is whole rows) or BLOCK; ``per``/``own`` [n // width] (written) or [0] (not
    kept); ``cols`` [width] (added to, over the first ``col_rows`` rows) or [0].

    Returns (rr, cc, rc, dd, max_abs, max_at, ref_absmax, outside, unequal)."""
    n = r.size
    rr = cc = rc = dd = 0.0
    best, max_at, ref_best = -1, -1, 0  # bit patterns of max |d| (-1: none yet) and max |r|
    outside = unequal = 0
    rows = per.size > 0
    keep_cols = cols.size > 0
    base = 0
    row = 0
    while base < n:
        end = min(base + width, n)
        s_rr = s_cc = s_rc = s_dd = 0.0
        for lo in range(base, end, BLOCK):  # a wide row in runs of BLOCK: two-level sums
            hi = min(lo + BLOCK, end)
            t_rr, t_cc, t_rc, t_dd, m_d, m_r, out, ne = _run(r, c, lo, hi, atol, rtol)
            s_rr += t_rr
            s_cc += t_cc
            s_rc += t_rc
            s_dd += t_dd
            outside += out
            unequal += ne
            ref_best = max(ref_best, m_r)
            if m_d > best:  # the first index holding this run's largest difference
                best = m_d
                for j in range(lo, hi):
                    if _bits(abs(np.float64(c[j]) - np.float64(r[j]))) == m_d:
                        max_at = j
                        break
        if keep_cols and row < col_rows:
            rs, cs = r[base:end], c[base:end]
            for j in range(rs.size):
                d = np.float64(cs[j]) - np.float64(rs[j])
                cols[j] += d * d
        if rows:
            per[row] = s_dd
            own[row] = s_rr
        rr += s_rr
        cc += s_cc
        rc += s_rc
        dd += s_dd
        base = end
        row += 1
    max_abs = _value(best) if best >= 0 else -1.0
    return rr, cc, rc, dd, max_abs, max_at, _value(ref_best), outside, unequal

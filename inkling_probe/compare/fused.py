"""One compiled pass over a chunk of finite float32/float64 values: every sum the metrics need.

The numpy pass (metrics._Acc) converts each chunk to float64 and then walks it about ten times (the
dots, the row sums, |d|, the tolerance, the comparisons); on a large tensor that is 4-5x the cost
of reading it. :func:`reduce_chunk` reads each value once and keeps every sum in float64 registers:
the sums of r^2, c^2, r c and d^2 (d = c - r, exact in float64 for float32 inputs), each token
row's sums of d^2 and r^2, the per-position sums of d^2 over the chunk's first rows, max |d| (its
first index), max |r|, and the counts of |d| > atol + rtol |r| and of d != 0.

Order of the sums: within runs of :data:`BLOCK` values (a row, or a part of a wider row; a run of
BLOCK values where the values are not rows) in the SIMD lanes the compiler picks for this CPU, then
run after run and row after row. The compiled code is fixed for a machine, so a pair measures the
same in every process of it, streamed or loaded, in one job or many, at any buffer address; the
sums differ from the numpy pass's BLAS order in their last bits only (and, like BLAS's, may differ in
their last bits on a CPU of another vector width).

NaN/Inf: the pass reports the sums it got; the caller sees non-finite ``rr``/``cc`` and measures the
chunk the general (masked) way, which rewrites the row sums (the per-position sums go to a scratch
the caller adds only for a finite chunk).

numba compiles the kernel on first use (cached on disk after); without numba, :func:`kernel` is None
and the numpy pass does everything.
"""
from __future__ import annotations

import functools

import numpy as np

BLOCK = 4096  # values summed in one run (a row, a part of a wider row, or a run of values that are not rows)
MIN_VALUES = 1 << 18  # smaller tensors keep the numpy pass (no compiler to load for a small compare)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def usable(r: np.ndarray, c: np.ndarray) -> bool:
    """The pass takes these chunks: flat contiguous float32/float64 on both sides."""
    return (r.dtype in DTYPES and c.dtype in DTYPES and r.ndim == 1 and c.ndim == 1
            and r.flags.c_contiguous and c.flags.c_contiguous)


@functools.cache
def kernel():
    """The compiled :func:`reduce_chunk`, or None where numba cannot be imported."""
    try:
        from inkling_probe.compare import fused_kernel
    except Exception:  # noqa: BLE001 (numba not installed, or broken for this Python/numpy: numpy pass)
        return None
    return fused_kernel.reduce_chunk


def row_sums(k, r: np.ndarray, c: np.ndarray, per: np.ndarray, own: np.ndarray) -> bool:
    """Each row's sums of d^2 and r^2 of the ``[rows, width]`` blocks ``r``, ``c`` into ``per`` and
    ``own`` by the compiled pass ``k`` (bit for bit the row sums the metrics' pass gives for the same
    rows); False when the blocks are not usable or hold a non-finite value (``per``/``own`` then
    hold nothing meaningful: the caller sums them the general way)."""
    if r.ndim != 2 or not r.shape[1]:
        return False
    rf, cf = r.reshape(-1), c.reshape(-1)
    if not usable(rf, cf):
        return False
    rr, cc = k(rf, cf, r.shape[1], per, own, NONE, 0, 0.0, 0.0)[:2]
    return bool(np.isfinite(rr) and np.isfinite(cc))


NONE = np.empty(0)  # [0] float64: "not kept"

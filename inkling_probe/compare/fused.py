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

from inkling_probe.compare.values import BLOCK

MIN_VALUES = 1 << 18  # smaller tensors keep the numpy pass (no compiler to load for a small compare)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def usable(r: np.ndarray, c: np.ndarray) -> bool:
    """The pass takes these chunks: flat contiguous float32/float64 on both sides."""
    return (r.dtype in DTYPES and c.dtype in DTYPES and r.ndim == 1 and c.ndim == 1
            and r.flags.c_contiguous and c.flags.c_contiguous)


@functools.cache
def kernel():
    """The compiled :func:`run`'s loop, or None where numba cannot be imported or cannot compile it
    (tried here on the two dtypes, so a broken install or disk cache shows now, not mid-compare)."""
    try:
        from inkling_probe.compare import fused_kernel

        k = fused_kernel.reduce_chunk
        for dtype in DTYPES:
            z = np.zeros(8, dtype)
            k(z, z, BLOCK, NONE, NONE, NONE, 0, 0.0, 0.0)
    except Exception:  # noqa: BLE001 (numba missing or broken, its cache unreadable or full: numpy pass)
        return None
    return k


def run(r: np.ndarray, c: np.ndarray, width: int, per, own, cols, col_rows: int, atol: float, rtol: float):
    """The compiled pass over one chunk (arguments and result: fused_kernel.reduce_chunk), or None
    when it is off or fails to compile for these arrays (then off for the rest of the process): the
    caller measures the chunk the numpy way."""
    k = None if _NO_KERNEL else kernel()
    if k is None:
        return None
    try:
        return k(r, c, width, per, own, cols, col_rows, atol, rtol)
    except Exception:  # noqa: BLE001 (a signature numba could not compile or cache: the numpy pass)
        _NO_KERNEL.append(True)
        return None


_NO_KERNEL: list = []  # set once the compiled pass failed in this process


def on() -> bool:
    """Is the compiled pass available in this process?"""
    return not _NO_KERNEL and kernel() is not None


def row_sums(r: np.ndarray, c: np.ndarray, per: np.ndarray, own: np.ndarray) -> bool:
    """Each row's sums of d^2 and r^2 of the ``[rows, width]`` blocks ``r``, ``c`` into ``per`` and
    ``own`` by the compiled pass (bit for bit the row sums the metrics' pass gives for the same
    rows); False when the blocks are not usable or hold a non-finite value, or the pass is off
    (``per``/``own`` then hold nothing meaningful: the caller sums them the general way)."""
    if r.ndim != 2 or not r.shape[1]:
        return False
    rf, cf = r.reshape(-1), c.reshape(-1)
    if not usable(rf, cf):
        return False
    got = run(rf, cf, r.shape[1], per, own, NONE, 0, 0.0, 0.0)
    return got is not None and bool(np.isfinite(got[0]) and np.isfinite(got[1]))


NONE = np.empty(0)  # [0] float64: "not kept"

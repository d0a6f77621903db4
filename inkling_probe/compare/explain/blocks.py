"""Walk a pair block by block in float64, and measure residuals without full-size temporaries.

A block key is ``(i0, .., i_{k-1}, slice(a, b))``: ints for the leading dims and a range of dim k,
with every later dim whole. ``x[key]`` is then a contiguous slab (a flat range of a C-ordered
array) of at most ``CHUNK`` elements (more only when one row of the trailing dims is longer), and
its float64 copy is the only temporary of its size. :class:`Remapped` re-indexes a dim lazily, so a
permuted candidate costs nothing until a block of it is read.
"""
from __future__ import annotations

import math

import numpy as np

CHUNK = 1 << 19  # elements per float64 block (4 MiB)


def block_keys(shape, budget: int = CHUNK):
    """Keys of slabs covering an array of ``shape`` in C order, each of about ``budget`` elements."""
    shape = tuple(shape)
    if not shape:
        yield ()
        return
    k = 0
    while k < len(shape) - 1 and math.prod(shape[k + 1:]) > budget:
        k += 1
    step = max(1, budget // max(1, math.prod(shape[k + 1:])))
    for prefix in np.ndindex(*shape[:k]):
        for a in range(0, shape[k], step):
            yield prefix + (slice(a, min(a + step, shape[k])),)


def f64(x) -> np.ndarray:
    """A float64 copy (never a view of the caller's array: callers may write into it)."""
    return np.array(x, dtype=np.float64, copy=True)


def pick(v: np.ndarray, key: tuple, d: int, ndim: int):
    """The entries of ``v`` (one per index of dim ``d``) for the block ``x[key]``, shaped to
    broadcast against it. ``key`` is a block key or an ``np.ix_`` tuple."""
    if d < len(key):
        k = key[d]
        if isinstance(k, (int, np.integer, np.ndarray)):
            return v[k]
        return v[k].reshape((-1,) + (1,) * (ndim - 1 - d))
    return v.reshape((-1,) + (1,) * (ndim - 1 - d))


class Remapped:
    """``base`` with dim ``dim`` re-indexed: ``view[.., j, ..] = base[.., src[j], ..]``, read lazily."""

    def __init__(self, base: np.ndarray, dim: int, src: np.ndarray):
        self.base, self.dim, self.src = base, dim, np.asarray(src, dtype=np.int64)
        self.shape = base.shape[:dim] + (len(self.src),) + base.shape[dim + 1:]
        self.ndim, self.dtype = base.ndim, base.dtype

    def __getitem__(self, key: tuple):
        key = tuple(key) + (slice(None),) * (self.ndim - len(key))
        d, k = self.dim, key[self.dim]
        if not isinstance(k, slice):  # an int or an index array (np.ix_): map it
            return self.base[key[:d] + (self.src[k],) + key[d + 1:]]
        view = self.base[key[:d] + (slice(None),) + key[d + 1:]]
        axis = d - sum(isinstance(i, (int, np.integer)) for i in key[:d])
        src = self.src[k]
        spans = runs(src)
        if spans is None:
            return view[(slice(None),) * axis + (src,)]
        return np.concatenate([view[(slice(None),) * axis + (slice(a, a + n),)] for a, n in spans], axis=axis)


def runs(src: np.ndarray, most: int = 64) -> list[tuple[int, int]] | None:
    """(start, length) of the consecutive runs of ``src`` (None when there are more than ``most``):
    a chunk permutation is copied slice by slice, faster than a gather."""
    cut = np.flatnonzero(np.diff(src) != 1) + 1
    if len(cut) >= most:
        return None
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(src)]])
    return [(int(src[a]), int(b - a)) for a, b in zip(starts, ends)]


def sums(r: np.ndarray, c: np.ndarray) -> tuple[float, float]:
    """(||c - r||^2, ||r||^2) over positions finite on both sides, of two float64 arrays."""
    d = (c - r).ravel()
    rf = r.ravel()
    dd, rr = dot(d, d), dot(rf, rf)
    if math.isfinite(dd + rr):
        return dd, rr
    both = np.isfinite(r) & np.isfinite(c)
    return sums(r[both], c[both]) if not both.all() else (dd, rr)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """<a, b> of two flat float64 arrays (einsum: faster than BLAS on blocks this size)."""
    return float(np.einsum("i,i->", a, b))


def rel_of(dd: float, rr: float) -> float:
    """sqrt(dd / rr) with 0/0 = 0 and x/0 = inf."""
    if rr == 0:
        return 0.0 if dd == 0 else math.inf
    return math.sqrt(dd / rr)


def rel(r, c, map_r=None, map_c=None, budget: int = CHUNK) -> float:
    """rel_rms(map_r(r), map_c(c)) in float64 block by block. ``r``/``c`` are arrays or lazy views of
    one shape; ``map_*(block64, key)`` transforms a block's values (e.g. undoes a ratio)."""
    dd = rr = 0.0
    for key in block_keys(r.shape, budget):
        rb, cb = f64(r[key]), f64(c[key])
        if map_r is not None:
            rb = map_r(rb, key)
        if map_c is not None:
            cb = map_c(cb, key)
        a, b = sums(rb, cb)
        dd, rr = dd + a, rr + b
    return rel_of(dd, rr)

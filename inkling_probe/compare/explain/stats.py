"""One float64 pass over a pair: the sums every cheap hypothesis is decided from.

Per index of every dim up to ``MAX_INDEX`` long: ``dd_i = ||c_i - r_i||^2`` and ``rr_i = ||r_i||^2``
(confinement). Along the row dim also ``<r_t, c_t>`` and ``||c_t||^2`` (per-row ratio, zero rows);
along the channel dim (the last) also ``<r_j, c_j>``, ``||c_j||^2`` and ``sum(c_j - r_j)``
(per-channel ratio and offset). Totals, the largest magnitudes of each side (saturation), the
count and energy of the values zero in the candidate only (zeroed) and whether any value is non-finite. Positions
not finite on both sides count as 0 on both. Reductions are einsums: no temporary beyond the
block's float64 copies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inkling_probe.compare.explain.blocks import block_keys, f64, rel_of

MAX_INDEX = 1 << 20  # longer dims get no per-index sums


@dataclass
class Along:
    """Per-index sums along one dim."""

    dd: np.ndarray
    rr: np.ndarray
    rc: np.ndarray | None = None
    cc: np.ndarray | None = None
    sd: np.ndarray | None = None


@dataclass
class Stats:
    """The sums of one pass (see the module docstring)."""

    dd: float = 0.0
    rr: float = 0.0
    rc: float = 0.0
    cc: float = 0.0
    r_absmax: float = 0.0
    c_absmax: float = 0.0
    zeroed: int = 0
    zeroed_energy: float = 0.0  # ||r||^2 where the candidate alone is zero
    nonfinite: bool = False
    dims: dict[int, Along] = field(default_factory=dict)

    @property
    def rel(self) -> float:
        return rel_of(self.dd, self.rr)


def _reduce(a: np.ndarray, b: np.ndarray | None, ax: int) -> np.ndarray:
    """sum over every axis but ``ax`` of ``a * b`` (of ``a`` when ``b`` is None); a scalar block
    counts as one index."""
    if a.ndim == 0:
        a, b = a.reshape(1), None if b is None else b.reshape(1)
    n = a.shape[ax]
    a3 = a.reshape(math.prod(a.shape[:ax]), n, -1)
    if b is None:
        return np.einsum("ijk->j", a3)
    return np.einsum("ijk,ijk->j", a3, b.reshape(a3.shape))


def collect(r: np.ndarray, c: np.ndarray, row_dim: int | None, chan_dim: int | None) -> Stats:
    """The pass. ``row_dim`` and ``chan_dim`` get the extra sums."""
    st = Stats()
    extra = {row_dim: ("rc", "cc"), chan_dim: ("rc", "cc", "sd")}
    for d, n in enumerate(r.shape):
        if n <= MAX_INDEX:
            st.dims[d] = Along(*(np.zeros(n) for _ in range(2)))
            for name in extra.get(d, ()):
                setattr(st.dims[d], name, np.zeros(n))
    for key in block_keys(r.shape):
        _block(st, key, r[key], c[key])
    return st


def _block(st: Stats, key: tuple, r: np.ndarray, c: np.ndarray) -> None:
    """Add block ``key`` (``r``, ``c``: its values in their own dtype) to the sums."""
    if not r.size:
        return
    ext = [float(x) for x in (r.max(), r.min(), c.max(), c.min())]  # in the narrow dtype: cheaper
    rb, cb = f64(r), f64(c)
    if not np.isfinite(sum(ext)):
        st.nonfinite = True
        both = np.isfinite(rb) & np.isfinite(cb)
        rb, cb = np.where(both, rb, 0.0), np.where(both, cb, 0.0)
        ext = [float(x) for x in (rb.max(), rb.min(), cb.max(), cb.min())]
    st.r_absmax = max(st.r_absmax, ext[0], -ext[1])
    st.c_absmax = max(st.c_absmax, ext[2], -ext[3])
    db = cb - rb
    k = len(key) - 1
    lead = Along(*(_reduce(a, b, 0) for a, b in ((db, db), (rb, rb), (rb, cb), (cb, cb))))  # per index of dim k
    st.dd, st.rr = st.dd + float(lead.dd.sum()), st.rr + float(lead.rr.sum())
    st.rc, st.cc = st.rc + float(lead.rc.sum()), st.cc + float(lead.cc.sum())
    for d, al in st.dims.items():
        if d < k:
            _add(al, key[d], rb, cb, db)
        elif d == k:
            for name in ("dd", "rr", "rc", "cc"):
                if getattr(al, name) is not None:
                    getattr(al, name)[key[d]] += getattr(lead, name)
            if al.sd is not None:
                al.sd[key[d]] += _reduce(db, None, 0)
        else:
            _add(al, slice(None), rb, cb, db, d - k)
    if ext[2] * ext[3] <= 0 and np.count_nonzero(c) < c.size:  # a zero needs the candidate to span 0
        gone = (cb == 0) & (rb != 0)
        st.zeroed += int(np.count_nonzero(gone))
        st.zeroed_energy += float(np.square(rb[gone]).sum())


def _add(al: Along, at, rb, cb, db, ax: int | None = None) -> None:
    """Accumulate the block's sums into index ``at`` (a whole block when ``ax`` is None)."""
    def red(a, b):
        if ax is None:
            return np.einsum("i,i->", a.ravel(), b.ravel()) if b is not None else a.sum()
        return _reduce(a, b, ax)

    al.dd[at] += red(db, db)
    al.rr[at] += red(rb, rb)
    if al.rc is not None:
        al.rc[at] += red(rb, cb)
        al.cc[at] += red(cb, cb)
    if al.sd is not None:
        al.sd[at] += red(db, None)

"""Per-tensor error metrics between a reference ``r`` and a candidate ``c``, accumulated in float64.

- ``rel_rms = ||c - r|| / ||r||`` (2-norms over the positions finite on both sides). A zero
  reference (``||r|| = 0``) gives ``rel_rms = 0`` when ``c`` is zero there too and ``inf``
  otherwise; an empty tensor gives 0 (nothing differs).
- ``cosine = <c, r> / (||c|| ||r||)``; 1 when both are zero, 0 when exactly one is.
- When the sides disagree about a NaN/Inf anywhere, ``rel_rms``, ``max_abs`` (its index: the
  first such position), ``max_rel`` are inf, ``sqnr_db`` is -inf and ``cosine`` is NaN: the finite
  positions alone never read as agreement.
- ``max_abs`` = max |c - r| and ``max_abs_index`` (multi-dim) where it occurs.
- ``sqnr_db = 10 log10(||r||^2 / ||c - r||^2)``: inf when equal.
- ``outside`` = fraction of elements with |c - r| > atol + rtol |r| (non-finite mismatches count).
- ``mismatch`` = fraction of elements not exactly equal (the natural error of ints and bools).
- NaN/Inf counts per side and the first non-finite index of each; ``nonfinite_mismatch`` counts
  positions where the two sides disagree about being NaN/+Inf/-Inf (a candidate NaN where the
  reference is finite is a divergence whatever the other numbers say).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from inkling_probe.compare.values import CHUNK, chunks, flat, from_any, unravel, value_shape

METRICS = ("rel_rms", "cosine", "max_abs", "max_rel", "outside", "mismatch")


@dataclass
class Metrics:
    """Errors of one candidate tensor against its reference (see the module docstring)."""

    numel: int = 0
    rel_rms: float = 0.0
    cosine: float = 1.0
    max_abs: float = 0.0
    max_abs_index: list | None = None
    sqnr_db: float = math.inf
    outside: float = 0.0
    mismatch: float = 0.0
    ref_rms: float = 0.0
    cand_rms: float = 0.0
    ref_absmax: float = 0.0
    ref_nan: int = 0
    ref_inf: int = 0
    cand_nan: int = 0
    cand_inf: int = 0
    ref_first_nonfinite: list | None = None
    cand_first_nonfinite: list | None = None
    nonfinite_mismatch: int = 0
    atol: float = 0.0
    rtol: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def max_rel(self) -> float:
        """max |c - r| relative to max |r| (inf for a zero reference that differs)."""
        return _ratio(self.max_abs, self.ref_absmax)

    @property
    def exact(self) -> bool:
        return self.mismatch == 0.0 and self.nonfinite_mismatch == 0

    def error(self, metric: str = "rel_rms") -> float:
        """The scalar error used for divergence decisions (larger = worse; 0 = identical).

        ``cosine`` gives 1 - cosine; non-finite mismatches make every error inf.
        """
        if self.nonfinite_mismatch:
            return math.inf
        if metric == "rel_rms":
            return self.rel_rms
        if metric == "cosine":
            return max(0.0, 1.0 - self.cosine)
        if metric == "max_abs":
            return self.max_abs
        if metric == "max_rel":
            return self.max_rel
        if metric == "outside":
            return self.outside
        if metric == "mismatch":
            return self.mismatch
        raise ValueError(f"unknown metric {metric!r} (known: {', '.join(METRICS)})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        d["max_rel"] = self.max_rel
        d.update(self.extra)
        return d


class _Acc:
    """Running float64 sums over chunks; with ``width`` (values a token row holds, the chunks then
    whole rows), each row's sums of squared differences and of squared reference values too."""

    def __init__(self, width: int | None = None):
        self.rr = self.cc = self.dd = self.rc = 0.0
        self.max_abs, self.max_at = -1.0, None
        self.ref_absmax = 0.0
        self.outside = self.unequal = 0
        self.counts = {"ref_nan": 0, "ref_inf": 0, "cand_nan": 0, "cand_inf": 0}
        self.first = {"ref": None, "cand": None}
        self.nonfinite_mismatch = 0
        self.first_odd = None  # flat index of the first position where the sides disagree about NaN/Inf
        self.width = width
        self.per, self.own = [], []  # per chunk: [rows] sums of d^2 and of r^2 (finite positions)

    def add(self, start: int, r: np.ndarray, c: np.ndarray, atol: float, rtol: float) -> None:
        with np.errstate(invalid="ignore", over="ignore"):
            rr, cc = float(r @ r), float(c @ c)
        if math.isfinite(rr) and math.isfinite(cc):  # no NaN/Inf on either side (an overflow of the
            self._add_finite(start, r, c, atol, rtol, rr, cc)  # squares goes the general way: same sums)
        else:
            self._add_general(start, r, c, atol, rtol)

    def _add_finite(self, start, r, c, atol, rtol, rr, cc) -> None:
        """The common case in few passes: no masks needed."""
        d = c - r
        self.rr += rr
        self.cc += cc
        self.rc += float(r @ c)
        self.dd += float(d @ d)
        self._rows(d, r)
        ad = np.abs(d, out=d)
        tol = np.abs(r)
        self._max(start, ad, tol)
        self.unequal += int(np.count_nonzero(ad))
        tol *= rtol
        tol += atol
        self.outside += int(np.count_nonzero(ad > tol))

    def _rows(self, d: np.ndarray, r0: np.ndarray) -> None:
        if self.width:
            d2, r2 = d.reshape(-1, self.width), r0.reshape(-1, self.width)  # [rows, width]
            self.per.append(np.einsum("ij,ij->i", d2, d2))
            self.own.append(np.einsum("ij,ij->i", r2, r2))

    def _max(self, start, ad, abs_r) -> None:
        if not ad.size:
            return
        i = int(ad.argmax())
        if float(ad[i]) > self.max_abs:
            self.max_abs, self.max_at = float(ad[i]), start + i
        self.ref_absmax = max(self.ref_absmax, float(abs_r.max()))

    def _add_general(self, start, r, c, atol, rtol) -> None:
        rf, cf = np.isfinite(r), np.isfinite(c)
        for side, x, fin in (("ref", r, rf), ("cand", c, cf)):
            self.counts[f"{side}_nan"] += int(np.count_nonzero(np.isnan(x)))
            self.counts[f"{side}_inf"] += int(np.count_nonzero(np.isinf(x)))
            if self.first[side] is None and not fin.all():
                self.first[side] = start + int(np.flatnonzero(~fin)[0])
        both = rf & cf
        with np.errstate(invalid="ignore"):
            same_special = (~rf & ~cf) & ((np.isnan(r) & np.isnan(c)) | (r == c))
        odd_at = ~both & ~same_special
        odd = int(np.count_nonzero(odd_at))
        self.nonfinite_mismatch += odd
        if odd and self.first_odd is None:
            self.first_odd = start + int(np.flatnonzero(odd_at)[0])
        r0, c0 = np.where(both, r, 0.0), np.where(both, c, 0.0)  # [n] finite-only values
        d = c0 - r0
        self.rr += float(r0 @ r0)
        self.cc += float(c0 @ c0)
        self.dd += float(d @ d)
        self.rc += float(r0 @ c0)
        self._rows(d, r0)
        ad = np.abs(d)
        self._max(start, ad, np.abs(r0))
        self.outside += int(np.count_nonzero(ad > atol + rtol * np.abs(r0))) + odd
        self.unequal += int(np.count_nonzero(both & (c != r))) + odd


def compare_tensors(ref, cand, atol: float = 0.0, rtol: float = 0.0) -> Metrics:
    """Metrics of ``cand`` against ``ref`` (numpy arrays, :class:`Values` or torch tensors with the
    same number of values; any dtypes; float64 sums)."""
    return compare_with_rows(ref, cand, atol, rtol)[0]


MAX_ROW_CHUNK = 8 * CHUNK  # rows wider than this are not summed in the metrics' pass (its chunks are rows)


def compare_with_rows(ref, cand, atol: float = 0.0, rtol: float = 0.0, token_dim: int | None = None):
    """(:class:`Metrics`, row sums) in one pass over the values: with a ``token_dim`` whose leading
    dims hold one row each (so token rows are contiguous), the chunks are whole rows (as many as fit
    in :data:`CHUNK` values) and ``row sums`` is ``(per, own)``: each row's sum of squared differences
    and of squared reference values over the positions finite on both sides, float64 ``[rows]``;
    else None."""
    rv, cv = from_any(ref), from_any(cand)
    shape = value_shape(rv)
    r, c = flat(rv), flat(cv)
    if r.size != c.size:
        raise ValueError(f"shapes differ: reference {list(shape)} vs candidate {list(value_shape(cv))}")
    width = _row_width(shape, token_dim) if not rv.packed and not cv.packed else None
    acc = _Acc(width)
    size = CHUNK if width is None else max(1, CHUNK // width) * width
    for start, rc, cc in chunks(r, c, size):
        acc.add(start, rc, cc, atol, rtol)
    sums = None
    if width:
        sums = (np.concatenate(acc.per), np.concatenate(acc.own)) if acc.per else (np.zeros(0), np.zeros(0))
    return _finish(acc, r.size, shape, atol, rtol), sums


def _row_width(shape, d: int | None) -> int | None:
    """Values a token row holds when rows along ``d`` are contiguous blocks of the flat values."""
    if d is None or not shape or math.prod(shape[:d]) != 1:
        return None
    width = math.prod(shape[d + 1:])
    return width if 0 < width <= MAX_ROW_CHUNK and shape[d] > 0 else None


def _finish(acc: _Acc, n: int, shape, atol: float, rtol: float) -> Metrics:
    m = Metrics(numel=n, atol=atol, rtol=rtol, **acc.counts)
    if n == 0:
        return m
    m.rel_rms = _ratio(math.sqrt(acc.dd), math.sqrt(acc.rr))
    m.cosine = _cosine(acc.rc, acc.rr, acc.cc)
    m.max_abs = max(acc.max_abs, 0.0)
    m.max_abs_index = unravel(acc.max_at, shape) if acc.max_at is not None else None
    m.sqnr_db = math.inf if acc.dd == 0 else (-math.inf if acc.rr == 0 else 10 * math.log10(acc.rr / acc.dd))
    m.outside = acc.outside / n
    m.mismatch = acc.unequal / n
    m.ref_rms, m.cand_rms = math.sqrt(acc.rr / n), math.sqrt(acc.cc / n)
    m.ref_absmax = acc.ref_absmax
    m.ref_first_nonfinite = unravel(acc.first["ref"], shape) if acc.first["ref"] is not None else None
    m.cand_first_nonfinite = unravel(acc.first["cand"], shape) if acc.first["cand"] is not None else None
    m.nonfinite_mismatch = acc.nonfinite_mismatch
    if m.nonfinite_mismatch:
        _nonfinite_errors(m, acc, shape)
    return m


def _nonfinite_errors(m: Metrics, acc: _Acc, shape) -> None:
    """The sides disagree about a NaN/Inf: every error metric is inf whatever the finite positions
    say (the table, the JSON and ``error()`` agree); the cosine of vectors holding a NaN is NaN, and
    ``max_abs_index`` points at the first such position."""
    m.rel_rms = m.max_abs = math.inf
    m.sqnr_db = -math.inf
    m.cosine = math.nan
    if acc.first_odd is not None:
        m.max_abs_index = unravel(acc.first_odd, shape)


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def _cosine(rc: float, rr: float, cc: float) -> float:
    if rr == 0 and cc == 0:
        return 1.0
    if rr == 0 or cc == 0:
        return 0.0
    return max(-1.0, min(1.0, rc / math.sqrt(rr * cc)))


def rel_rms(ref, cand) -> float:
    """``||c - r|| / ||r||`` in float64 (the conventions of :class:`Metrics`)."""
    return compare_tensors(ref, cand).rel_rms

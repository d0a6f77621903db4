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
import threading
from dataclasses import asdict, dataclass, field

import numpy as np

from inkling_probe.compare import fused
from inkling_probe.compare.values import CHUNK, flat, from_any, unravel, value_shape

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


class _Buffers:
    """float64 chunk buffers reused from chunk to chunk and call to call (one set per thread): no
    chunk allocates, and no whole-tensor float64 copy is ever made."""

    def __init__(self, size: int):
        self.size = size
        self.r, self.c, self.d, self.t = (np.empty(size) for _ in range(4))  # [size] float64 each
        self.m = np.empty(size, dtype=bool)


_LOCAL = threading.local()
PIECE = 1 << 16  # values per element-wise pass (a few 512 KiB buffers stay in the core's L2 cache)


def _buffers(size: int) -> _Buffers:
    """This thread's buffers for chunks of ``size`` values (rows wider than CHUNK get their own)."""
    if size > CHUNK:
        return _Buffers(size)
    b = getattr(_LOCAL, "buffers", None)
    if b is None:
        b = _LOCAL.buffers = _Buffers(CHUNK)
    return b


@dataclass
class Sums:
    """Per-index sums of one pass, over the positions finite on both sides (float64): ``per`` and
    ``own`` each token row's sum of squared differences and of squared reference values; ``cols``
    (``[width]``, or None) the sums of squared differences per position within a row of a ``[rows, width]`` tensor whose
    width is one dim, summed over some of the rows only (the first PIECE values of every chunk: an
    eighth of the rows of a large tensor, all of a small one), so each is at most the whole's (a
    lower bound, what compare/relations.py needs, at an eighth of the cost), for PIECE values or
    more (a smaller pair costs little to read again); ``rr`` the whole tensor's sum of squared
    reference values."""

    per: np.ndarray
    own: np.ndarray
    cols: np.ndarray | None = None
    rr: float = 0.0


class _Acc:
    """Running float64 sums over chunks; with ``width`` (values a token row holds, the chunks then
    whole rows), each row's sums of squared differences and of squared reference values too, and
    with ``columns`` the squared differences per position within a row (over some rows, see Sums)."""

    def __init__(self, n: int, width: int | None = None, columns: bool = False, size: int = CHUNK):
        self.rr = self.cc = self.dd = self.rc = 0.0
        self.max_abs, self.max_at = -1.0, None
        self.ref_absmax = 0.0
        self.outside = self.unequal = 0
        self.counts = {"ref_nan": 0, "ref_inf": 0, "cand_nan": 0, "cand_inf": 0}
        self.first = {"ref": None, "cand": None}
        self.nonfinite_mismatch = 0
        self.first_odd = None  # flat index of the first position where the sides disagree about NaN/Inf
        self.width = width
        self.piece = max(1, PIECE // width) * width if width else PIECE
        self.buf = _buffers(size)
        rows = n // width if width else 0
        self.per, self.own = np.zeros(rows), np.zeros(rows)  # [rows] sums of d^2 and of r^2 (finite positions)
        self.cols = (np.zeros(width), np.empty(width)) if width and columns else None  # sums, scratch
        self.compiled = n >= fused.MIN_VALUES and fused.on()  # the compiled pass (fused.py)

    def add(self, start: int, r_in: np.ndarray, c_in: np.ndarray, atol: float, rtol: float) -> None:
        """Add the chunk of values ``r_in``, ``c_in`` (flat, any real dtype) starting at ``start``."""
        if self.compiled and fused.usable(r_in, c_in) and self._add_fused(start, r_in, c_in, atol, rtol):
            return
        n, b = r_in.size, self.buf
        r, c, d = self._f64(r_in, b.r[:n]), self._f64(c_in, b.c[:n]), b.d[:n]
        with np.errstate(invalid="ignore", over="ignore"):
            for lo, hi in self._pieces(n):  # converted and subtracted while in cache
                if r is not r_in:
                    np.copyto(r[lo:hi], r_in[lo:hi], casting="unsafe")  # the values astype(float64) gives
                if c is not c_in:
                    np.copyto(c[lo:hi], c_in[lo:hi], casting="unsafe")
                np.subtract(c[lo:hi], r[lo:hi], out=d[lo:hi])
            rr, cc = float(np.dot(r, r)), float(np.dot(c, c))
        if math.isfinite(rr) and math.isfinite(cc):  # no NaN/Inf on either side (an overflow of the
            self._add_finite(start, r, c, d, atol, rtol, rr, cc, r is not r_in)  # squares: the general way)
        else:
            self._add_general(start, r, c, atol, rtol)

    def _add_fused(self, start: int, r: np.ndarray, c: np.ndarray, atol: float, rtol: float) -> bool:
        """The chunk in one compiled pass (fused.py); False, adding nothing, when a value is not
        finite (or a square overflows), or the pass cannot run: the numpy pass then measures the chunk."""
        w = self.width or fused.BLOCK
        per = own = cols = fused.NONE
        if self.width:
            lo = start // w
            per, own = self.per[lo: lo + r.size // w], self.own[lo: lo + r.size // w]
        if self.cols is not None:
            cols = self.cols[1]  # scratch: added to the sums only for a finite chunk
            cols.fill(0.0)
        got = fused.run(r, c, w, per, own, cols, self.piece // w, float(atol), float(rtol))
        if got is None:
            return False
        rr, cc, rc, dd, max_abs, max_at, ref_absmax, outside, unequal = got
        if not (math.isfinite(rr) and math.isfinite(cc)):
            return False
        self.rr += rr
        self.cc += cc
        self.rc += rc
        self.dd += dd
        if max_abs > self.max_abs:
            self.max_abs, self.max_at = max_abs, start + max_at
        self.ref_absmax = max(self.ref_absmax, ref_absmax)
        self.outside += outside
        self.unequal += unequal
        if self.cols is not None:
            total, _ = self.cols
            total += cols
        return True

    @staticmethod
    def _f64(x: np.ndarray, buf: np.ndarray) -> np.ndarray:
        """``x`` itself when it is contiguous float64, else the buffer its values go to."""
        return x if x.dtype == np.float64 and x.flags.c_contiguous else buf

    def _pieces(self, n: int):
        """(lo, hi) ranges of about PIECE values, whole rows each where the values are rows."""
        if n <= self.piece:
            return ((0, n),)
        return [(lo, min(lo + self.piece, n)) for lo in range(0, n, self.piece)]

    def _add_finite(self, start, r, c, d, atol, rtol, rr, cc, own_r: bool) -> None:
        """The common case in few passes: no masks needed; after the dots over the chunk, the
        element-wise work piece by piece (each piece stays in cache through its passes). ``own_r``:
        ``r`` is this accumulator's buffer, free to overwrite with the tolerances."""
        self.rr += rr
        self.cc += cc
        with np.errstate(over="ignore"):  # a float64 difference's square may overflow (sqnr -inf)
            self.rc += float(np.dot(r, c))
            self.dd += float(np.dot(d, d))
        outside = unequal = 0
        for lo, hi in self._pieces(r.size):
            ad = np.abs(d[lo:hi], out=d[lo:hi])
            tol = np.abs(r[lo:hi], out=r[lo:hi] if own_r else self.buf.t[lo:hi])
            self._rows(start + lo, ad, tol, lo == 0)  # |d|^2 = d^2, |r|^2 = r^2 exactly: the same row sums
            self._max(start + lo, ad, tol)
            tol *= rtol
            tol += atol
            m = self.buf.m[lo:hi]
            out = int(np.count_nonzero(np.greater(ad, tol, out=m)))
            outside += out  # past a tolerance >= 0 is unequal: count those only when some are within it
            unequal += out if out == hi - lo and atol >= 0 and rtol >= 0 else \
                int(np.count_nonzero(np.not_equal(ad, 0.0, out=m)))  # on bools: 4x count_nonzero(ad)
        self.outside += outside
        self.unequal += unequal

    def _rows(self, start: int, d: np.ndarray, r0: np.ndarray, cols: bool = True) -> None:
        """Row sums of ``d`` and ``r0`` (whole rows from ``start``); with ``cols``, their per-position sums too."""
        if self.width:
            lo, hi = start // self.width, (start + d.size) // self.width
            d2, r2 = d.reshape(-1, self.width), r0.reshape(-1, self.width)  # [rows, width]
            np.einsum("ij,ij->i", d2, d2, out=self.per[lo:hi])
            np.einsum("ij,ij->i", r2, r2, out=self.own[lo:hi])
            if self.cols is not None and cols:
                dd, tmp = self.cols
                dd += np.einsum("ij,ij->j", d2, d2, out=tmp)

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
        self._rows(start, d, r0)
        ad = np.abs(d)
        self._max(start, ad, np.abs(r0))
        self.outside += int(np.count_nonzero(ad > atol + rtol * np.abs(r0))) + odd
        self.unequal += int(np.count_nonzero(both & (c != r))) + odd

    def sums(self) -> Sums | None:
        if not self.width:
            return None
        return Sums(self.per, self.own, self.cols[0] if self.cols is not None else None, self.rr)


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
    m, sums = reduce_values(ref, cand, atol, rtol, token_dim)
    return m, (sums.per, sums.own) if sums is not None else None


def reduce_values(ref, cand, atol: float = 0.0, rtol: float = 0.0, token_dim: int | None = None,
                  columns: bool = False) -> tuple[Metrics, Sums | None]:
    """:func:`compare_with_rows` with the row sums as :class:`Sums`; ``columns`` adds the sums per
    position within a row where a row's values are one dim (``[.., rows, width]``, leading dims 1)."""
    rv, cv = from_any(ref), from_any(cand)
    shape = value_shape(rv)
    r, c = flat(rv), flat(cv)
    if r.size != c.size:
        raise ValueError(f"shapes differ: reference {list(shape)} vs candidate {list(value_shape(cv))}")
    width = row_width(shape, token_dim) if not rv.packed and not cv.packed else None
    size = chunk_size(width)
    pieces = ((start, r[start: start + size], c[start: start + size]) for start in range(0, r.size, size))
    return reduce_chunks(pieces, r.size, shape, atol, rtol, width, columns and one_dim_rows(shape, token_dim))


def chunk_size(width: int | None) -> int:
    """Values per chunk: CHUNK, or as many whole rows of ``width`` as fit in it (one at least)."""
    return CHUNK if width is None else max(1, CHUNK // width) * width


def one_dim_rows(shape, d: int | None) -> bool:
    """A token row's values are one dim of ``shape`` (the dims after ``d`` but one are 1)."""
    return d is not None and len(shape) > d + 1 and len(shape) - d - 1 - list(shape[d + 1:]).count(1) <= 1


def reduce_chunks(pieces, n: int, shape, atol: float, rtol: float, width: int | None = None,
                  columns: bool = False) -> tuple[Metrics, Sums | None]:
    """The metrics (and row sums with ``width``) of ``pieces``: ``(start, r, c)`` flat chunks of
    :func:`chunk_size` values in order, in any real dtypes, covering ``n`` values of ``shape``."""
    acc = _Acc(n, width, columns and n >= PIECE, chunk_size(width))  # a smaller pair is cheap to read again
    for start, rc, cc in pieces:
        acc.add(start, rc, cc, atol, rtol)
    return _finish(acc, n, shape, atol, rtol), acc.sums()


def row_width(shape, d: int | None) -> int | None:
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
    m.sqnr_db = _sqnr_db(acc.rr, acc.dd)
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


def _sqnr_db(rr: float, dd: float) -> float:
    """10 log10(rr / dd): inf when equal, -inf for a zero reference or a ratio that underflows (a
    float64 difference whose square overflows where the reference's does not)."""
    if dd == 0:
        return math.inf
    ratio = rr / dd
    return -math.inf if ratio == 0 else 10 * math.log10(ratio)


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

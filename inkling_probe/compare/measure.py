"""Measure one aligned pair: load both arrays, conform their shapes, set aside routing changes,
compute the metrics and the per-row errors. One pair is in memory at a time (the streaming unit
of compare); a plain pair with nothing to conform or set aside is not even that: it is read and
reduced chunk by chunk (compare/stream.py), to the same numbers. numpy only.

Per-row error: along the token dim, row ``i``'s error is ``e_i = ||c_i - r_i|| / (||r|| / sqrt(n))``:
the row's error relative to an average row, so a divergence confined to one token is judged on
that token, not drowned in the tensor-wide average (and a near-zero row cannot blow up).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare import fused, masks, readahead, stream
from inkling_probe.compare.align import Entry
from inkling_probe.compare.conform import ShapeMismatch, conform, token_dim_of
from inkling_probe.compare.metrics import Metrics, compare_tensors, one_dim_rows, reduce_values, row_width
from inkling_probe.compare.values import CHUNK, Values, as_float64
from inkling_probe.errors import ProbeError, ValuesNotStored


@dataclass
class Measured:
    status: str  # exact | ok | shape | unreadable   (ok may still diverge: the caller decides)
    metrics: Metrics | None = None
    error: float | None = None
    note: str = ""
    token_rows: int | None = None  # number of token rows (for matching set-aside rows)
    row_errors: np.ndarray | None = None  # [n] e_i per token row (float keys with a token dim)
    row_scale: np.ndarray | None = None  # [n] rho_i: each reference row's norm over an average row's
    masked: list[int] | None = None  # rows set aside here
    masked_errors: np.ndarray | None = None  # [len(masked)] e_i of the set-aside rows, before setting aside
    ref: Values | None = None  # the conformed pair, kept only when the caller asks (decisions)
    cand: Values | None = None
    token_dim: int | None = None
    tokens: list | None = None  # per row, its token(s) where rows are not tokens (compare/experts.py)
    columns: tuple | None = None  # ([width] dd per position over some rows, metrics.Sums; the total rr)


def same_bits(a: Entry, b: Entry) -> bool:
    """Bit-identical by the index alone (hashes of every rank's shard): a claim of the dumps' writers,
    which :func:`measure` checks against the data before it says ``exact``."""
    sig = lambda e: sorted((r["rank"], r["shape"], r["dtype"], r["shard"], r["hash"]) for r in e.rows)
    return all(r["hash"] for r in a.rows + b.rows) and sig(a) == sig(b)


def equal_bytes(a: Values, b: Values) -> bool:
    """The two stored arrays hold the same bytes (a memcmp-speed check, no float64 pass)."""
    x, y = np.ascontiguousarray(a.array), np.ascontiguousarray(b.array)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return bool(np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8)))


TRUSTED = "exact by the index hashes alone (no values recorded to check them against)"
HASH_LIED = ("the index hashes say bit-identical but the stored data differ: a dump's index does not "
             "describe its data (edited or damaged); measured from the data")


def load(dump, e: Entry) -> Values:
    """The entry's values (numpy, stored type) with its original dtype name."""
    return Values(dump.array(e.key, step=e.step, call=e.call), e.dtype)


def token_rows(e: Entry) -> int | None:
    """Token rows of an entry from the index alone."""
    shape = e.global_shape()
    d = token_dim_of(shape, e.first.get("token_dim", 0))
    return shape[d] if d is not None else None


def measure(ref_dump, ref: Entry, cand_dump, cand: Entry, metric: str, rtol: float,
            set_aside=lambda n: None, batch_rows=(None, None), keep=False, realign=None) -> Measured:
    """The pair's metrics; ``set_aside(n_rows)`` gives token rows to set aside (or None);
    ``keep`` keeps the conformed arrays on the result (for decisions and explain); ``realign(r, c)``
    may reorder both conformed arrays (weights in the order of their routing ids)."""
    hashed = same_bits(ref, cand) and batch_rows == (None, None)
    if not hashed and not keep and realign is None:  # measured ahead in a worker (compare/parallel.py)?
        ahead = readahead.lookup(ref_dump, ref, cand_dump, cand, metric, rtol, batch_rows)
        if ahead is not None and not (ahead.token_rows is not None and set_aside(ahead.token_rows)):
            return ahead
    mask = masks.candidates(ref.key, ref.dtype, cand.key, cand.dtype)  # read whole, by meaning (masks.py)
    if not hashed and not keep and realign is None and tuple(batch_rows) == (None, None) and not mask:
        streamed = _streamed(ref_dump, ref, cand_dump, cand, metric, rtol, set_aside)
        if streamed is not None:
            return streamed
    try:
        r, c = load(ref_dump, ref), load(cand_dump, cand)
    except ValuesNotStored as e:
        if hashed:  # a hash-only dump: the hashes are all there is, and the row says it trusted them
            return Measured("exact", Metrics(numel=ref.first["numel"]), 0.0, token_rows=token_rows(ref), note=TRUSTED)
        return Measured("unreadable", note=str(e).splitlines()[0])
    except ProbeError as e:
        return Measured("unreadable", note=str(e).splitlines()[0])
    lied = False
    if hashed:
        if equal_bytes(r, c):  # hashes are the writers' claim: exact only when the data say so too
            return Measured("exact", Metrics(numel=ref.first["numel"]), 0.0, token_rows=token_rows(ref))
        lied = True
    batches = tuple(recorded_batch(d) if b is not None else None for d, b in zip((ref_dump, cand_dump), batch_rows))
    try:
        if mask:
            mk = masks.compare_masks(r, c, ref.first, cand.first, *batch_rows, batches=batches)
            if mk is not None:
                return _mask_measured(mk, metric, HASH_LIED if lied else "")
        conf = conform(r, c, ref.first, cand.first, *batch_rows, batches=batches)
    except ShapeMismatch as e:
        return Measured("shape", note=str(e))
    r, c, td = conf.ref, conf.cand, conf.token_dim
    out = Measured("ok", note="; ".join(x for x in (HASH_LIED if lied else "", conf.note) if x), token_dim=td)
    if realign is not None:
        r, c, why = realign(r, c)
        out.note = "; ".join(x for x in (out.note, why) if x)
    if td is not None and not r.packed and r.array.ndim:
        out.token_rows = r.array.shape[td]
        rows = set_aside(out.token_rows)
        if rows:
            out.masked_errors = row_errors(r, c, td)[rows]  # their own error, before (compare/reach.py)
            arr = np.array(c.array, copy=True)
            idx = [slice(None)] * arr.ndim
            idx[td] = rows
            arr[tuple(idx)] = r.array[tuple(idx)]
            c, out.masked = Values(arr, c.dtype), rows
    atol = abs_tolerance(ref, rtol)
    sums = None
    if out.masked:
        out.metrics = judged_metrics(r, c, td, out.masked, atol, rtol)
    else:  # the per-row sums from the metrics' own pass where the token rows are contiguous
        out.metrics, sums = reduce_values(r, c, atol, rtol, td if not r.packed and r.array.ndim else None,
                                          columns=realign is None)
    _errors(out, metric, sums, td is not None and not r.packed and r.array.ndim > 0, lambda: row_errors_and_scale(r, c, td))
    if keep:
        out.ref, out.cand = r, c
    return out


def _mask_measured(mk: masks.Masks, metric: str, lied: str) -> Measured:
    """A mask pair's measurement: exact, or inf error (a position masked on one side only)."""
    m = masks.metrics(mk)
    note = "; ".join(x for x in (lied, mk.note) if x)
    return Measured("exact" if not mk.differ else "ok", m, m.error(metric), note)


_BATCHES: dict = {}  # (dump path, index rows) -> the batch it recorded


def recorded_batch(dump) -> int | None:
    """The batch ``dump`` ran: the one size its rows' batch dims (``meta.batch_dim``) and flattened
    batches (``meta.batch``) agree on; None where none is recorded or they disagree."""
    index = dump.index
    ident = (str(dump.path), len(index))
    if ident not in _BATCHES:
        seen = set()
        for row in index:
            meta = row.get("meta") or {}
            d = meta.get("batch_dim")
            if d is not None and 0 <= d < len(row["shape"]):
                seen.add(int(row["shape"][d]))
            if meta.get("batch"):
                seen.add(int(meta["batch"]))
        _BATCHES[ident] = seen.pop() if len(seen) == 1 else None
    return _BATCHES[ident]


def abs_tolerance(ref: Entry, rtol: float) -> float:
    """The absolute tolerance beside ``rtol``: ``rtol`` times the reference tensor's rms (its index row)."""
    return rtol * float(ref.first.get("rms") or 0.0)


def _errors(out: Measured, metric: str, sums, rows: bool, from_arrays) -> None:
    """The error and, for ``rows`` (a token dim), the row errors: from the pass's ``sums``, else
    ``from_arrays()``; the per-position sums of a diverged candidate's columns are kept for
    compare/relations.py."""
    out.error = out.metrics.error(metric)
    if rows and out.metrics.nonfinite_mismatch == 0:
        out.row_errors, out.row_scale = from_arrays() if sums is None else errors_from_sums(sums.per, sums.own)
        if sums is not None and sums.cols is not None:
            out.columns = (sums.cols, sums.rr)


def _streamed(ref_dump, ref: Entry, cand_dump, cand: Entry, metric: str, rtol: float, set_aside) -> Measured | None:
    """The measurement of a plain pair read chunk by chunk (compare/stream.py), or None: not plain,
    or token rows to set aside (the arrays are loaded for that)."""
    if any(e.first.get("offset", -1) >= 0 or len(e.rows) > 1 for e in (ref, cand)):  # a pack or shards: loaded
        return None
    shape = tuple(ref.first["shape"])
    td = token_dim_of(shape, ref.first.get("token_dim", 0))
    width = row_width(shape, td)
    if (td is not None and (width is None or set_aside(shape[td]))) or not shape:
        return None
    pair = stream.open_pair(ref_dump, ref, cand_dump, cand)
    if pair is None:
        return None
    with pair:
        metrics, sums = pair.reduce(abs_tolerance(ref, rtol), rtol, width, one_dim_rows(shape, td))
    out = Measured("ok", metrics, token_dim=td, token_rows=shape[td] if td is not None else None)
    _errors(out, metric, sums, td is not None, None)
    return out


def judged_metrics(r: Values, c: Values, td: int | None, masked: list[int] | None, atol: float,
                   rtol: float) -> Metrics:
    """The metrics of the token rows judged: rows set aside are left out of every sum and fraction.

    A set-aside row reads exact by construction; counted in, it would dilute the error by the
    fraction of rows set aside, and the candidate and the control, which set aside different rows
    (each its own routing changes), would then be measured on different scales: a control that
    flipped at token 1 and a candidate that flipped at token 5 gave a floor diluted 16x and an
    error diluted 3x on the seed-3 hunt, and a benign run was flagged. Indices (``max_abs_index``,
    the first non-finite ones) still point into the whole tensor; ``extra["rows_judged"]`` says
    how many rows the numbers cover."""
    if not masked or td is None:
        return compare_tensors(r, c, atol=atol, rtol=rtol)
    n = r.array.shape[td]
    keep = np.setdiff1d(np.arange(n), np.asarray(masked, dtype=np.int64))
    m = compare_tensors(Values(np.take(r.array, keep, axis=td), r.dtype),
                        Values(np.take(c.array, keep, axis=td), c.dtype), atol=atol, rtol=rtol)
    for name in ("max_abs_index", "ref_first_nonfinite", "cand_first_nonfinite"):
        at = getattr(m, name)
        if at is not None:
            at[td] = int(keep[at[td]])
    m.extra["rows_judged"] = int(len(keep))
    return m


def row_errors(ref, cand, d: int) -> np.ndarray:
    """e_i along dim ``d`` (finite positions only), in float64, one row block at a time."""
    return row_errors_and_scale(ref, cand, d)[0]


def row_errors_and_scale(ref, cand, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(e_i, rho_i) along dim ``d``: the row errors and each reference row's norm relative to an
    average row (``rho_i = ||r_i|| / (||r|| / sqrt(n))``: the scale e_i's rounding noise takes)."""
    r_all, c_all = ref.array if isinstance(ref, Values) else ref, cand.array if isinstance(cand, Values) else cand
    n = r_all.shape[d]
    r_m, c_m = np.moveaxis(r_all, d, 0).reshape(n, -1), np.moveaxis(c_all, d, 0).reshape(n, -1)
    per, own = np.zeros(n), np.zeros(n)
    block = max(1, CHUNK // max(r_m.shape[1], 1))  # the rows metrics.compare_with_rows sums at once
    compiled = r_m.size >= fused.MIN_VALUES and fused.on()  # as the metrics' pass decides
    for lo in range(0, n, block):
        if compiled and fused.row_sums(r_m[lo: lo + block], c_m[lo: lo + block], per[lo: lo + block],
                                       own[lo: lo + block]):
            continue
        r = r_m[lo: lo + block].astype(np.float64)
        c = c_m[lo: lo + block].astype(np.float64)
        both = np.isfinite(r) & np.isfinite(c)
        diff = np.where(both, c - r, 0.0)
        r0 = np.where(both, r, 0.0)
        per[lo: lo + block] = np.einsum("ij,ij->i", diff, diff)
        own[lo: lo + block] = np.einsum("ij,ij->i", r0, r0)
    return errors_from_sums(per, own)


def errors_from_sums(per: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e_i, rho_i) from each row's sum of squared differences and of squared reference values."""
    n = len(per)
    total = float(own.sum())
    if total == 0:
        return np.where(per > 0, np.inf, 0.0), np.zeros(n)
    return np.sqrt(per * n / total), np.sqrt(own * n / total)


def float_rows(v: Values, d: int) -> np.ndarray:
    """``[n, ...]`` float64 values with the token dim first."""
    return np.moveaxis(as_float64(v), d, 0)

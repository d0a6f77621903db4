"""A lookup that ignores the position: each output row is a sum of one table row per value of the
row's integer input, the same table row for a value wherever it stands, where the reference's
rows depend on the position (per-position tables or offsets, e.g. one codebook per mel bin, whose
offsets were dropped from the index).

Read from the culprit's recorded integer input ``ids`` ([rows, positions], :mod:`.recorded`): with
``K[t, v]`` the count of value ``v`` in row t, the hypothesis says ``C = K G`` for some table ``G``
(``[values, features]``). That is a test only where it over-determines: rows whose counts are
linearly dependent (the same values in another order, above all) must come out as the same
combination. It holds when ``K`` has rank below the number of rows, the candidate's residual
off ``K``'s column space is at the noise level and the reference's is not (the reference's rows
depend on the position). Every row holding as many values, a constant row is in ``K``'s span: it
fits any table and says nothing, so both residuals are taken relative to the rows' variation about
their mean row (zeros, one row repeated or a constant offset added fit nothing new: a candidate
whose rows do not vary is no lookup). Evidence: the rows holding the same values in another order, the rank.
Cost: a least-squares fit of ``[rows, values]`` against ``[rows, features]`` (inputs and outputs
up to ``recorded.MAX_INPUT`` elements; at most MAX_VALUES distinct values and MAX_COUNTS cells of
``K``: a larger fit is not tried, and nothing is claimed).
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num, short_list
from inkling_probe.compare.explain.blocks import f64
from inkling_probe.compare.explain.pair import Pair
from inkling_probe.compare.explain.recorded import MARGIN, MAX_INPUT, row_errors, row_inputs

MAX_VALUES = 4096
MAX_COUNTS = 1 << 22  # cells of K [rows, values] (float64: 32 MiB; three SVDs of it at most)


def positionless_lookup(p: Pair) -> Finding | None:
    """The hypothesis (module docstring) for the first recorded integer input it holds for, or None."""
    if p.row_dim is None or p.r.size > MAX_INPUT:
        return None
    for name, ids in row_inputs(p):
        if ids.ndim == 2 and ids.shape[1] >= 2 and ids.dtype.kind in "iu":
            f = _one(p, name, ids)
            if f is not None:
                return f
    return None


def _one(p: Pair, name: str, ids: np.ndarray) -> Finding | None:
    n = ids.shape[0]
    values, inv = np.unique(ids, return_inverse=True)
    if values.size > MAX_VALUES or n * values.size > MAX_COUNTS:
        return None
    k = np.zeros((n, values.size))
    np.add.at(k, (np.repeat(np.arange(n), ids.shape[1]), inv.reshape(-1)), 1.0)  # [rows, values] counts
    rank = int(np.linalg.matrix_rank(k))
    if rank >= n:
        return None  # every output fits: no test
    r, c = (f64(np.moveaxis(x, p.row_dim, 0)).reshape(n, -1) for x in (p.r, p.c))  # [rows, features]
    res_c, res_r = _off_span(k, c, flat=np.inf), _off_span(k, r, flat=0.0)
    if res_c > p.noise or res_r <= MARGIN * max(p.noise, 1e-12):
        return None
    pairs = _same_values(ids)
    errs = row_errors(p)
    if errs is None:  # a row dim past the stats' per-index limit: from the rows at hand
        rr, dd = (r * r).sum(1), ((c - r) ** 2).sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            errs = np.where(rr > 0, np.sqrt(dd / np.where(rr > 0, rr, 1.0)), np.where(dd > 0, np.inf, 0.0))
    changed = np.flatnonzero(errs > p.noise).tolist()
    ev = {"input": name, "rows": changed, "n_rows": n, "positions": ids.shape[1], "values": values.size, "rank": rank,
          "residual_rel_rms": res_c, "ref_residual_rel_rms": res_r, "same_values_rows": pairs[:16]}
    same = f"rows {short_list([list(g) for g in pairs], 8)} hold the same values in another order and come out " \
           f"alike; " if pairs else ""
    return Finding("positionless_lookup",
                   f"each row is a sum of one table row per value of input {name}, the same row for a value at "
                   f"every position ({same}{n} rows fit {values.size} values' rows to rel_rms {fmt_num(res_c)} of their variation, "
                   f"the reference's do not: {fmt_num(res_r)}): the lookup ignores the position, e.g. "
                   f"per-position (codebook) offsets dropped from the index", ev, kind="offset")


def _off_span(k: np.ndarray, y: np.ndarray, flat: float) -> float:
    """rel_rms of ``y`` off the column space of ``k`` (what no table ``G`` in ``k G`` can fit), relative
    to ``y``'s variation about its mean row (a constant row is in the span); ``flat`` when ``y``'s rows
    do not vary at all."""
    g, *_ = np.linalg.lstsq(k, y, rcond=None)
    d = y - k @ g
    y0 = y - y.mean(0)
    yy = float((y0 * y0).sum())
    return float(np.sqrt((d * d).sum() / yy)) if yy > 0 else flat


def _same_values(ids: np.ndarray) -> list[tuple[int, ...]]:
    """Groups of rows holding the same multiset of values in different orders."""
    groups: dict[bytes, list[int]] = {}
    for t, row in enumerate(ids):
        groups.setdefault(np.sort(row).tobytes(), []).append(t)
    return [tuple(g) for g in groups.values()
            if len(g) > 1 and len({ids[t].tobytes() for t in g}) > 1]

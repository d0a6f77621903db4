"""Rows normalised again: some token rows of the candidate are the reference's rows scaled to unit rms.

``c_t = r_t / rms(r_t)`` on the changed rows, ``c_t = r_t`` on the others: an RMSNorm (without its
weight) applied a second time to rows that were already normalised with one, such as vision rows
re-normalised after being scattered into the text stream. Holds when every changed row of the
candidate has rms 1 within the noise, the reference's rows do not, and undoing it (``r_t / rms(r_t)``
in place of ``r_t``) leaves a residual at the noise level. Evidence: the rows, both sides' row rms.
Cost: one float64 pass over the pair (row sums), the pair's own size.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num, short_list
from inkling_probe.compare.explain.pair import Pair

MARGIN = 4.0  # a row changed when its own error exceeds MARGIN x noise
MIN_WIDTH = 8  # rows narrower than this have no meaningful rms


def renormalised_rows(p: Pair) -> Finding | None:
    """The hypothesis (module docstring), or None."""
    d = p.row_dim
    if d is None or p.r.ndim < 2 or p.r.size // max(p.r.shape[d], 1) < MIN_WIDTH:
        return None
    r = np.moveaxis(np.asarray(p.r, dtype=np.float64), d, 0).reshape(p.r.shape[d], -1)  # [n, w]
    c = np.moveaxis(np.asarray(p.c, dtype=np.float64), d, 0).reshape(p.c.shape[d], -1)
    if not (np.isfinite(r).all() and np.isfinite(c).all()):
        return None
    r_rms = np.sqrt((r * r).mean(1))  # [n]
    c_rms = np.sqrt((c * c).mean(1))
    err = np.linalg.norm(c - r, axis=1) / np.maximum(np.linalg.norm(r, axis=1), 1e-30)
    tol = max(MARGIN * p.noise, 1e-6)
    rows = np.flatnonzero(err > tol)
    if rows.size == 0 or (np.abs(c_rms[rows] - 1.0) > tol).any() or (np.abs(r_rms[rows] - 1.0) <= tol).any():
        return None
    undone = r.copy()
    undone[rows] /= r_rms[rows, None]
    residual = float(np.linalg.norm(c - undone) / max(np.linalg.norm(c), 1e-30))
    if residual > p.noise:
        return None
    ev = {"dim": d, "rows": rows.tolist(), "cand_row_rms": [float(x) for x in c_rms[rows[:64]]],
          "ref_row_rms": [float(x) for x in r_rms[rows[:64]]], "residual_rel_rms": residual}
    return Finding("renormalised_rows",
                   f"rows {short_list(rows.tolist())} re-normalised: each row scaled to unit rms "
                   f"(candidate row rms {fmt_num(float(c_rms[rows].min()))}..{fmt_num(float(c_rms[rows].max()))}, "
                   f"reference {fmt_num(float(r_rms[rows].min()))}..{fmt_num(float(r_rms[rows].max()))}; "
                   f"{rows.size} of {r.shape[0]} rows)", ev, kind="ratio")


__all__ = ["renormalised_rows"]

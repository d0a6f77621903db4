"""Rows normalised again: some token rows of the candidate are the reference's rows scaled to unit rms.

``c_t = r_t / rms(r_t)`` on the changed rows, ``c_t = r_t`` on the others: an RMSNorm (without its
weight) applied a second time to rows that were already normalised with one, such as vision rows
re-normalised after being scattered into the text stream. Holds when every changed row of the
candidate has rms 1 within the noise, the reference's rows do not, and undoing it (``r_t / rms(r_t)``
in place of ``r_t``) leaves a residual at the noise level. Evidence: the rows, both sides' row rms.
Cost: nothing beyond the one-pass per-row sums (``rr``, ``rc``, ``cc``) every hypothesis shares.
"""
from __future__ import annotations

import math

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num, short_list
from inkling_probe.compare.explain.pair import Pair

MARGIN = 4.0  # a row changed when its own error exceeds MARGIN x noise
MIN_WIDTH = 8  # rows narrower than this have no meaningful rms


def renormalised_rows(p: Pair) -> Finding | None:
    """The hypothesis (module docstring), or None."""
    d = p.row_dim
    al = p.stats.dims.get(d) if d is not None else None
    if al is None or al.rc is None or p.r.ndim < 2:
        return None
    width = p.r.size // max(p.r.shape[d], 1)
    if width < MIN_WIDTH:
        return None
    rr, rc, cc = (np.asarray(x, dtype=np.float64) for x in (al.rr, al.rc, al.cc))  # [n] per-row sums
    if not (np.isfinite(rr).all() and np.isfinite(cc).all()):
        return None
    r_rms, c_rms = np.sqrt(rr / width), np.sqrt(cc / width)
    err = np.sqrt(np.maximum(rr + cc - 2 * rc, 0.0) / np.maximum(rr, 1e-300))  # [n] each row's own error
    tol = max(MARGIN * p.noise, 1e-6)
    rows = np.flatnonzero(err > tol)
    if rows.size == 0 or (np.abs(c_rms[rows] - 1.0) > tol).any() or (np.abs(r_rms[rows] - 1.0) <= tol).any():
        return None
    s = np.ones_like(rr)  # the undoing: r_t / s_t, s_t = rms(r_t) on the changed rows
    s[rows] = r_rms[rows]
    res = np.maximum(cc - 2 * rc / s + rr / (s * s), 0.0)  # ||c_t - r_t / s_t||^2 from the sums
    residual = math.sqrt(float(res.sum()) / max(float(cc.sum()), 1e-300))
    if residual > p.noise:
        return None
    ev = {"dim": d, "rows": rows.tolist(), "cand_row_rms": [float(x) for x in c_rms[rows[:64]]],
          "ref_row_rms": [float(x) for x in r_rms[rows[:64]]], "residual_rel_rms": residual}
    return Finding("renormalised_rows",
                   f"rows {short_list(rows.tolist())} re-normalised: each row scaled to unit rms "
                   f"(candidate row rms {fmt_num(float(c_rms[rows].min()))}..{fmt_num(float(c_rms[rows].max()))}, "
                   f"reference {fmt_num(float(r_rms[rows].min()))}..{fmt_num(float(r_rms[rows].max()))}; "
                   f"{rows.size} of {len(rr)} rows)", ev, kind="ratio")

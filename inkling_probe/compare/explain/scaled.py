"""Per-row and per-channel ratios: each token row (or each channel) scaled by its own factor.

``row_ratio``: ``c_t = s_t r_t`` (a norm computed per row wrongly, a per-token scale misapplied);
``channel_ratio``: ``c[.., j] = s_j r[.., j]`` along the last dim (a norm weight not loaded:
``c = r / w``; ``w`` applied where the model uses ``1 + w``, or the reverse). Each ``s`` is the
least-squares fit from the one-pass sums; the hypothesis holds when undoing the factors leaves a
residual at the noise level (screened from the sums, verified on the values), no constant ratio
explains it, every factor is fitted on at least 8 values, and some factor is off 1 by more than
4 x its own fit's noise (``noise * rms / ||r_i||``: a factor fitted on n values is n^-1/2 as noisy
as one value); a reading that names no row or channel claims nothing. When both readings hold, only
the one that leaves the smaller residual is said (rows scaled are not a norm weight, and back).
Evidence: the factors' spread, the rows or channels off 1, and for rows the power law ``s_t ~ rms(r_t)^p`` when
one fits (``p = -1``: the row normalised again); for channels the readings of the factors as a
norm weight (``1/s``: a weight not applied; ``s/(1-s)``: ``w`` used for ``1+w``; ``1/(s-1)``: the
reverse) that look like one.
"""
from __future__ import annotations

import math

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num, median, short_list, summary_of
from inkling_probe.compare.explain.blocks import pick
from inkling_probe.compare.explain.pair import MIN_FIT, Pair
from inkling_probe.compare.explain.ratio import fitted_residual

MARGIN = 4.0


def fit(p: Pair, d: int | None) -> np.ndarray | None:
    """The factor per index of dim ``d`` when undoing them is within noise by the sums, else None."""
    al = p.stats.dims.get(d) if d is not None else None
    if al is None or al.rc is None or p.stats.rr == 0 or p.r.shape[d] < 2 or p.r.size // p.r.shape[d] < MIN_FIT:
        return None
    live = al.rr > 0
    if (al.rc[live] == 0).any():
        return None
    s = np.ones_like(al.rr)
    s[live] = al.rc[live] / al.rr[live]
    res = np.where(live, fitted_residual(al.rr, np.where(live, al.rc, 1.0), al.cc), al.cc)
    if math.sqrt(max(float(res.sum()), 0.0) / p.stats.rr) > 2 * p.noise:
        return None
    return s


def _scaled(p: Pair, d: int | None):
    """(factors, residual, indices off 1) when dividing dim ``d`` by its factors explains the pair."""
    s = fit(p, d)
    if s is None:
        return None
    residual = p.residual(map_c=lambda cb, key: cb / pick(s, key, d, p.r.ndim))
    if residual is None:
        return None
    off = np.flatnonzero(np.abs(s - 1.0) > MARGIN * _fit_noise(p, d))
    return (s, residual, off) if off.size else None


def _fit_noise(p: Pair, d: int) -> np.ndarray:
    """Per index of dim ``d``, the noise of its fitted factor: the per-value noise (``noise`` x the
    reference's rms) over the norm of the reference values it is fitted on."""
    rr = p.stats.dims[d].rr
    per_value = p.noise * np.sqrt(p.stats.rr / p.r.size)
    with np.errstate(divide="ignore"):
        return np.where(rr > 0, per_value / np.sqrt(rr), np.inf)


def row_ratio(p: Pair, exclude: bool) -> Finding | None:
    """Each row scaled by its own factor (``exclude``: a constant ratio already holds)."""
    got = None if exclude else _scaled(p, p.row_dim)
    if got is None:
        return None
    s, residual, off = got
    ev = {"dim": p.row_dim, "factors": summary_of(s), "rows": off.tolist(),
          "row_factors": s[off[:64]].tolist(), "residual_rel_rms": residual}
    law = _power_law(s, p.stats.dims[p.row_dim].rr / (p.r.size // p.r.shape[p.row_dim]))
    if law is not None:
        ev["power_of_row_rms"] = law
    tail = f"; factor ~ rms(row)^{law:.2f}" if law is not None else ""
    f = ev["factors"]
    return Finding("row_ratio", f"each row scaled by its own factor: rows {short_list(off.tolist())} "
                   f"({len(off)} of {len(s)}), factors {fmt_num(f['min'])}..{fmt_num(f['max'])} "
                   f"(median {fmt_num(f['median'])}){tail}", ev)


def channel_ratio(p: Pair, exclude: bool) -> Finding | None:
    """Each channel (last dim) scaled by its own factor."""
    got = None if exclude else _scaled(p, p.chan_dim)
    if got is None:
        return None
    s, residual, off = got
    readings = norm_weight_readings(s)
    ev = {"dim": p.chan_dim, "factors": summary_of(s), "channels": off.tolist(),
          "channel_factors": s[off[:64]].tolist(), "readings": readings, "residual_rel_rms": residual}
    f = ev["factors"]
    said = "; " + "; ".join(r["says"] for r in readings) if readings else ""
    return Finding("channel_ratio", f"each channel scaled by its own factor: channels "
                   f"{short_list(off.tolist())} ({len(off)} of {len(s)}), factors {fmt_num(f['min'])}.."
                   f"{fmt_num(f['max'])} (median {fmt_num(f['median'])}){said}", ev)


def row_or_channel_ratio(p: Pair, exclude: bool) -> list[Finding]:
    """:func:`row_ratio` and :func:`channel_ratio` where they hold; when both do, the one whose
    factors leave the smaller residual."""
    found = [f for f in (row_ratio(p, exclude), channel_ratio(p, exclude)) if f is not None]
    return sorted(found, key=lambda f: f.evidence["residual_rel_rms"])[:1]


def norm_weight_readings(s: np.ndarray) -> list[dict]:
    """The readings of per-channel factors as a norm weight ``w`` that look like one.

    A weight of the ``w`` kind sits near 1 (all positive, median within [0.5, 2]); one of the
    ``1 + w`` kind sits near 0 (median |w| < 0.5).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        cands = [("1/w", 1.0 / s, "weight", "c = r / w: a norm weight w not applied (w = 1/factor)"),
                 ("w/(1+w)", s / (1.0 - s), "offset", "c = r w / (1+w): w applied where the model uses 1+w"),
                 ("(1+w)/w", 1.0 / (s - 1.0), "offset", "c = r (1+w) / w: 1+w applied where the model uses w")]
    out = []
    for label, w, style, says in cands:
        if not np.isfinite(w).all():
            continue
        med = median(w)
        looks = (w > 0).all() and 0.5 <= med <= 2.0 if style == "weight" else abs(med) < 0.5 and np.abs(w).max() < 4
        if looks:
            out.append({"factor_is": label, "w": summary_of(w), "says": says})
    return out


def _power_law(s: np.ndarray, ms: np.ndarray) -> float | None:
    """p when ``|s| = a * rms^p`` fits every row to 1% (rms from the mean square ``ms``), else None."""
    ok = (ms > 0) & (s != 0)
    if ok.sum() < 4:
        return None
    x, y = 0.5 * np.log(ms[ok]), np.log(np.abs(s[ok]))
    if x.max() - x.min() < 0.1:
        return None
    xc = x - x.mean()
    pw = float(xc @ (y - y.mean()) / (xc @ xc))  # least-squares slope
    a = y.mean() - pw * x.mean()
    return float(pw) if np.abs(y - (pw * x + a)).max() < 0.01 else None

"""NaN/Inf onset: where the candidate (or the reference) stops being finite.

Run only when the one-pass sums met a non-finite value: one more pass counts, per side, the values
non-finite where the other side is finite, the first of them (row-major) and the token rows they hit.
"""
from __future__ import annotations

import math

import numpy as np

from inkling_probe.compare.explain.base import Finding, short_list
from inkling_probe.compare.explain.blocks import block_keys
from inkling_probe.compare.explain.pair import Pair


def nonfinite(p: Pair) -> list[Finding]:
    out = []
    for side, x, other in (("candidate", p.c, p.r), ("reference", p.r, p.c)):
        ev = _scan(x, other, p.ctx.token_dim)
        if ev is None:
            continue
        n, nan, first, rows = ev["count"], ev["nan"], ev["first_index"], ev.get("token_rows", [])
        where = f", token rows {short_list(rows)}" if rows else ""
        out.append(Finding("nonfinite", f"{side} non-finite where the other is finite: {n} values "
                           f"({nan} NaN, {n - nan} Inf), first at {first}{where}", {"side": side, **ev}))
    return out


def _scan(x: np.ndarray, other: np.ndarray, token_dim: int | None) -> dict | None:
    n = nan = 0
    first = None
    rows = np.zeros(x.shape[token_dim], bool) if token_dim is not None and x.ndim > token_dim else None
    for key in block_keys(x.shape):
        xb, ob = x[key], other[key]
        bad = ~np.isfinite(xb) & np.isfinite(ob)
        if not bad.any():
            continue
        n += int(bad.sum())
        nan += int((np.isnan(xb) & bad).sum())
        if first is None:
            first = _first(key, bad, x.shape)
        if rows is not None:
            _mark_rows(rows, key, bad, token_dim)
    if not n:
        return None
    ev = {"count": n, "nan": nan, "inf": n - nan, "first_index": first}
    if rows is not None:
        ev["token_rows"] = np.flatnonzero(rows).tolist()
    return ev


def _first(key: tuple, bad: np.ndarray, shape) -> list[int]:
    """The multi-index of the first bad value of block ``key`` (a contiguous slab: C order holds)."""
    start = [i if not isinstance(i, slice) else i.start for i in key] + [0] * (len(shape) - len(key))
    flat = int(np.ravel_multi_index(start, shape)) if shape else 0
    flat += int(np.flatnonzero(bad)[0])
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _mark_rows(rows: np.ndarray, key: tuple, bad: np.ndarray, d: int) -> None:
    k = len(key) - 1
    if d < k:
        rows[key[d]] = True
        return
    ax = d - k
    hit = bad.reshape(math.prod(bad.shape[:ax]), bad.shape[ax], -1).any(axis=(0, 2))
    rows[key[d] if d == k else slice(None)] |= hit

"""Decode steps: what a step reads from the steps before it, and the token each step decoded.

- **Cache feeders.** A decode step's attention and short convs read what earlier steps wrote into
  the KV cache and conv state of the same layer. Each row of layer ``i`` at a step gets, as extra
  feeders, the rows of layer ``i`` at the first recorded step (the prefill) and at the step just
  before, and the layer's worst row (largest score) of any step before: an error carried by the
  cache is then inherited (its row is tainted through them), not born again at every decode step,
  however many steps after it a step reads it (attention of step 6 peaked on what step 2 wrote
  there: it was an 'independent' culprit). One fault, one culprit, however many steps are recorded.
- **Decoded tokens.** The token a step feeds forward is a decision: ``argmax`` of the logits'
  rows that decode from (the last row when the next step runs one token; every row when the next
  step runs as many). A different decoded token is classified like a routing flip, against the
  logits' own change (near-tie: the reference's margin between the two tokens is within the
  logits' movement; clear otherwise). The next step's rows are that token's own rows: set aside at
  every key of that step; the steps after it are judged with the reach allowance (reach.py).
"""
from __future__ import annotations

import bisect

import numpy as np

from inkling_probe.compare import decisions as dec
from inkling_probe.settings import matches_any

LOGITS = ("logits", "lm_head", "*.lm_head", "*.logits")  # keys whose rows decode the next tokens
OTHER_TOKEN = 0.5  # the next step's first key differs on a row by this much (relative): another token


def link_cache(rows) -> None:
    """Fill ``row.cache_feeders`` (module docstring) for rows of layered keys in later steps."""
    by_step: dict[int, dict[int, list]] = {}  # step -> layer -> [(score, ident)]
    steps: list[int] = []  # in order of first appearance
    seen: set = set()
    rising = True  # steps appeared in increasing order (the usual case: a bisection, not a scan)
    worst: dict[int, tuple] = {}  # layer -> (score, ident) of its worst row in the steps before the current one
    now: dict[int, tuple] = {}  # the same, in the latest step
    for r in rows:
        if r.layer is None:
            continue
        if r.step not in seen:
            rising = rising and (not steps or r.step > steps[-1])
            steps.append(r.step)
            seen.add(r.step)
            for layer, w in now.items():
                worst[layer] = _worse(worst.get(layer), w)
            now = {}
        earlier = _earlier(steps, r.step, rising)
        if earlier:
            picked = {earlier[0], earlier[-1]}
            r.cache_feeders = [x for s in sorted(picked) for _, x in by_step.get(s, {}).get(r.layer, [])]
            latest = rising and r.step == steps[-1]
            w = worst.get(r.layer) if latest else _worst_before(by_step, r.step, r.layer)
            if w is not None and w[1] not in r.cache_feeders:
                r.cache_feeders.append(w[1])
        item = (float(getattr(r, "score", 0.0) or 0.0), (r.key, r.step, r.call))
        by_step.setdefault(r.step, {}).setdefault(r.layer, []).append(item)
        if r.step == steps[-1]:
            now[r.layer] = _worse(now.get(r.layer), item)
        else:  # a step before the latest one, seen again
            worst[r.layer] = _worse(worst.get(r.layer), item)


def _worse(a: tuple | None, b: tuple) -> tuple:
    """The ``(score, ident)`` with the larger score (the first on a tie)."""
    return b if a is None or b[0] > a[0] else a


def _worst_before(by_step: dict, step: int, layer) -> tuple | None:
    """The layer's worst ``(score, ident)`` in the steps below ``step`` (steps not rising: a scan)."""
    out = None
    for s, layers in by_step.items():
        if s < step:
            for item in layers.get(layer, []):
                out = _worse(out, item)
    return out


def _earlier(steps: list[int], step: int, rising: bool) -> list[int]:
    """The first and the last of ``steps`` (in order) below ``step``: by bisection when they rise
    (link_cache was quadratic in the steps: 8 s of a 500-step compare)."""
    if not rising:
        return [s for s in steps if s < step]
    i = bisect.bisect_left(steps, step)
    return [steps[0], steps[i - 1]] if i else []


def is_logits(key: str) -> bool:
    return matches_any(key, LOGITS)


def decoded_rows(n_rows: int, n_next: int) -> list[int] | None:
    """The logits rows that decode the next step's ``n_next`` tokens (None: not known)."""
    if n_next == 1:
        return [n_rows - 1]
    if n_next == n_rows:
        return list(range(n_rows))
    return None


def decoded_change(ref: np.ndarray, other: np.ndarray, n_next: int) -> dec.Decision | None:
    """The decision between two ``[n, V]`` logits about the next step's tokens (rows re-numbered as
    the next step's token rows); None when which rows decode is not known."""
    if ref.ndim != 2 or ref.shape != other.shape:
        return None
    rows = decoded_rows(ref.shape[0], n_next)
    if rows is None:
        return None
    r, c = ref[rows], other[rows]  # [n_next, V]
    ok = np.isfinite(r).all(axis=1) & np.isfinite(c).all(axis=1)
    r_ids = np.where(ok, np.argmax(np.nan_to_num(r, nan=-np.inf), axis=1), -1)[:, None]
    c_ids = np.where(ok, np.argmax(np.nan_to_num(c, nan=-np.inf), axis=1), -2)[:, None]
    return dec.classify(r_ids, c_ids, r, c, selection=True)

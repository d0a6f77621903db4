"""First divergence and attribution: where the error is born, not where it is first big.

Each row has a score ``s = error / threshold`` (> 1: diverged). The keys feeding a row are the
rows before it in the same layer (same step) and the last row of the previous layer (the residual
stream it reads); across steps the last row of the previous step feeds the next (decode reads the
cache). ``score_in`` is the largest score among them and

    jump = s / max(score_in, 1)

so a row whose inputs are within tolerance has ``jump = s``, and a row that merely carries an
upstream error forward has ``jump ~ 1``. The first divergence is the first diverged row in execution
order; the culprit is the diverged row with the largest jump (the earliest on ties): the op where
the error is born. A row can only be the culprit with ``jump > 1``.

Decisions (integer keys such as top-k expert ids) are discontinuous: a small upstream error can
flip one and its "jump" then measures nothing but the flip. A decision whose inputs were already
off (``score_in > 1``) is therefore a consequence, never the culprit; one that changed while its
inputs were within tolerance can be.
"""
from __future__ import annotations

import math

from inkling_probe.compare.measure import is_decision
from inkling_probe.compare.report import Row


def attribute(rows: list[Row]) -> None:
    """Fill ``score_in`` and ``jump`` of rows given in execution order (scores already set)."""
    layer_scores: list[float] = []  # scores of the rows so far in the current layer run
    current = object()
    last_prev = 0.0  # score of the last row of the previous run
    for row in rows:
        run = (row.step, row.layer)
        if run != current:
            if layer_scores:
                last_prev = layer_scores[-1]
            layer_scores, current = [], run
        feeding = layer_scores + [last_prev]
        row.score_in = max(feeding)
        row.jump = _jump(row.score, row.score_in)
        layer_scores.append(row.score)


def _jump(score: float, score_in: float) -> float:
    den = max(score_in, 1.0)
    if math.isinf(score) and math.isinf(den):
        return 1.0
    return score / den


def first_divergence(rows: list[Row]) -> Row | None:
    return next((r for r in rows if r.diverged), None)


def culprit(rows: list[Row]) -> Row | None:
    """The diverged row with the largest jump (> 1), the earliest on ties; decisions fed by an
    already-diverged input are skipped."""
    best = None
    for r in rows:
        if not r.diverged or r.jump <= 1.0 or (_is_decision(r) and r.score_in > 1.0):
            continue
        if best is None or r.jump > best.jump:
            best = r
    return best


def _is_decision(row: Row) -> bool:
    return bool(row.ref_dtype) and is_decision(row.ref_dtype)

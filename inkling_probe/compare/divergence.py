"""First divergence and attribution: where the error is born, not where it is first big.

Each row has a score ``s = error / allowance`` (> 1: diverged), the larger of its tensor-wide
score and its worst token row's score. A row's **feeders** are the keys it is computed from:

- its recorded inputs (``<key>.in.*``, from ``record(..., inputs=True)``) when they exist;
- otherwise the rows before it in the same layer and step, and the last row of the layer run
  before (the residual stream it reads); the first row of a step is fed by the last row of the
  step before (decode reads the cache).

``score_in`` is the largest feeder score and ``jump = s / max(score_in, 1)``. A diverged row is
**born** (a culprit) when

1. its inputs are clean: no feeder is *tainted* (``born = "clean_inputs"``). A row is tainted
   when it diverged, or when a feeder is tainted and its own score is still at least DECAY (0.5)
   of its allowance: an upstream error that persists, even just under the allowance, explains
   what follows it; one that has faded below half the allowance no longer does; or
2. its error is far beyond what its inputs carry (``jump >= INDEPENDENT``, 8): a second,
   independent error on top of an upstream one (``born = "independent"``).

An error can also be born *under* the allowance and cross it only downstream, where an op
amplifies it. A row with clean feeders whose score rises to at least ORIGIN_MIN (0.75) of its
allowance and RISE (3) times its feeders' is a **sub-allowance birth**: it taints what follows
it. When a diverged row's taint leads back to such a birth, that row is the culprit
(``born = "below_allowance"``), and the diverged row is its first visible consequence: here the
culprit is not the first divergence.

A routing decision is never born from diverged inputs (a flip is then a consequence), nor from
near-tie flips (those are the router's input noise; measure them, don't blame them). With a
control the allowance is K x the control's error at the key, so an op that amplifies its input
error (a renormalisation, a softmax) amplifies the control's error alike: its jump stays ~1 and
it is not blamed.

A step fed another token at every token row (a different decoded token, compare/decoded.py) is the
consequence of that decision, not a birth: when the logits row that decoded it is tainted or born (or
its own step was itself so fed), every row of the step has that origin as a feeder and none is born
there, not even as independent (its rows are set aside; this holds should one still diverge). One
fault, one culprit, however many steps its tokens part. A benign near-tie change has no origin.

Where the feeders are guessed, a diverged row whose error holds an exact relation to the reference
(constant ratio, permutation, rows or channels confined) that none of its tainted feeders shows is its
own culprit, whatever its jump (``born = "own_relation"``, compare/relations.py: it reads data, so
the engine runs it after :func:`attribute`).

Culprits are ranked: the rows born from clean inputs, below their allowance or by their own relation
in execution order (the earliest step first: across decode steps error is born where it first shows,
not where it is largest), then the independent ones by jump. ``jump`` is kept as a column, not as
the rule.
"""
from __future__ import annotations

import math

from inkling_probe.compare.report import Row

INDEPENDENT = 8.0
DECAY = 0.5
ORIGIN_MIN = 0.75
RISE = 3.0


def feeders_of(rows: list[Row]):
    """Yield ``(row, feeders)`` in execution order: the row's recorded inputs, else the rows before it
    in its layer and step and the last row of the layer run before (module docstring)."""
    by_key: dict[tuple, Row] = {}
    inputs: dict[tuple, list[Row]] = {}  # (key, step) -> its recorded inputs' rows (indexed: no scan per row)
    layer_rows: list[Row] = []
    current = object()
    last_prev: Row | None = None
    for row in rows:
        run = (row.step, row.layer)
        if run != current:
            if layer_rows:
                last_prev = layer_rows[-1]
            layer_rows, current = [], run
        feeders = inputs.get((row.key, row.step), []) or layer_rows + ([last_prev] if last_prev else [])
        yield row, feeders + [by_key[x] for x in getattr(row, "cache_feeders", ()) if x in by_key]  # steps.py
        if not row.key.rsplit(".", 2)[-2:-1] == ["in"]:
            layer_rows.append(row)
        by_key[(row.key, row.step, row.call)] = row
        for parent in _parents(row.key):  # rows of `parent.in.*` in this step, in order
            inputs.setdefault((parent, row.step), []).append(row)


def attribute(rows: list[Row]) -> None:
    """Fill ``feeders``, ``score_in``, ``jump`` and ``born`` of rows in execution order."""
    origin: dict[int, Row] = {}  # id(tainted row) -> the row where its error was born
    fed: dict[int, Row] = {}  # step whose every token row was fed another token -> that token's origin
    for row, feeders in feeders_of(rows):
        row.feeders = [f.key for f in feeders][-8:]
        row.score_in = max((f.score for f in feeders if f.status != "skipped"), default=0.0)
        row.jump = _jump(row.score, row.score_in)
        token = fed.get(row.step)
        sources = ([token] if token else []) + [origin[id(f)] for f in feeders if id(f) in origin]
        dirty = bool(sources)
        row.born = _born(row, dirty, other_token=token is not None)
        if row.born:
            origin[id(row)] = row
        elif dirty and (row.diverged or max(row.score, getattr(row, "carry_score", None) or 0.0) >= DECAY):
            origin[id(row)] = sources[-1]
            if row.diverged and not sources[-1].diverged and not sources[-1].born:
                sources[-1].born = "below_allowance"  # the birth this divergence leads back to
        elif not dirty and row.score >= ORIGIN_MIN and row.score >= RISE * row.score_in and not row.decision:
            origin[id(row)] = row  # a sub-allowance birth: a culprit once something it feeds diverges
        _decoded(row, origin.get(id(row)) or token, fed)


def _decoded(row: Row, src: Row | None, fed: dict) -> None:
    """A logits row that fed every token row of the next step another token (``row.decodes``,
    compare/decoded.py): that step is the consequence of ``src`` (where this row's error was born, or
    the origin of the other token this row's own step was fed); none when the change is benign."""
    decodes = getattr(row, "decodes", None)
    if decodes and src is not None:
        step_next, n_next, changed = decodes
        if len(changed) >= n_next:
            fed[step_next] = src


def _parents(key: str) -> list[str]:
    """Every P with ``key`` starting ``P + ".in."`` (its recorded inputs)."""
    out, at = [], key.find(".in.")
    while at >= 0:
        out.append(key[:at])
        at = key.find(".in.", at + 1)
    return out


def _jump(score: float, score_in: float) -> float:
    den = max(score_in, 1.0)
    if math.isinf(score) and math.isinf(den):
        return 1.0
    return score / den


def _born(row: Row, dirty: bool, other_token: bool = False) -> str:
    if not row.diverged:
        return ""
    if row.decision and (dirty or not row.clear_flips):
        return ""
    if not dirty:
        return "clean_inputs"
    if row.jump >= INDEPENDENT and not other_token:
        return "independent"
    return ""


def first_divergence(rows: list[Row]) -> Row | None:
    return next((r for r in rows if r.diverged), None)


def culprits(rows: list[Row]) -> list[Row]:
    """Every born row, ranked (module docstring)."""
    clean = [r for r in rows if r.born in ("clean_inputs", "below_allowance", "own_relation")]
    independent = sorted((r for r in rows if r.born == "independent"), key=lambda r: -r.jump)
    return clean + independent


def culprit(rows: list[Row]) -> Row | None:
    """The top-ranked culprit."""
    ranked = culprits(rows)
    return ranked[0] if ranked else None

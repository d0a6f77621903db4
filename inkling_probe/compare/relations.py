"""Independent errors without recorded inputs: a key that is its own culprit by what it shows.

Without recorded inputs (``KEY.in.*``) a row's feeders are guessed from execution order
(divergence.py), so an engine instrumented by hand with ``probe()`` chains unrelated keys: after a
first fault every later key of the layer has a tainted feeder, and a second, unrelated fault reads
as its consequence unless its error is 8x larger. What an inherited error cannot do is hold an
*exact* relation to the reference that its source does not hold. A diverged row left unborn by
attribution is its own culprit (``born = "own_relation"``) when one of these holds at the row itself
(explain's test, the row's allowance as the noise: undoing it leaves the noise only) and none of its
tainted guessed feeders (score >= DECAY) shows it:

- **constant ratio** ``c = s r``: a feeder shows one when its own candidate is as parallel to its
  reference (``1 - cos <= 2 noise^2``): a linear op passes a scale on, nothing else makes one;
- **layout permutation**: a feeder of the same shape whose rms is preserved as a permutation's is
  (``|rms_c - rms_r| <= 2 noise rms_r``): an element-wise op passes a permutation on;
- **token rows confined** (rows R diverged, the rest within noise): a feeder whose rows before R are
  within its noise and which has error at or before the last of R (causal: an error on token t
  reaches tokens >= t only). A feeder off on the rows where the row is exact did not reach it;
- **channels or heads confined**: a feeder whose own error is concentrated (``outside <= 1/2``).

A feeder's error that spreads over every row (a 448x scale) cannot leave rows 5 and 9 alone off
downstream; one that is not a permutation cannot make a permutation. Where a feeder *might* show the
relation (no token rows recorded, shapes that don't match) it is taken to show it: the rule only ever
adds a culprit where the evidence excludes inheritance. Rows with rows set aside after a routing change
are not judged on their rows (set-aside rows read exact by construction). Cost: rows are screened from
their metrics (cosine, rms, ``outside``, token errors) and at most MAX_EXAMINED are examined; one is
explained (its data read again) only when a relation is left open: a relation its tainted feeders
would all show anyway, or one the walk's sums exclude (a cosine too far from 1 for a constant ratio,
an rms not kept for a layout permutation, a divergence on more than half of every dim's indices for
a confinement), cannot mark it.
"""
from __future__ import annotations

import functools

import numpy as np

from inkling_probe.compare.divergence import DECAY, feeders_of
from inkling_probe.compare.report import Report, Row, join_notes

MAX_EXAMINED = 32  # diverged rows explained per compare, in execution order
MIN_VALUES = 16  # a constant ratio over fewer values says little (one value always has one)
MARGIN = 4.0  # a token row is off past MARGIN x its key's allowance (explain's confined uses the same)
CONCENTRATED = 0.5  # an error on at most this fraction of the elements is concentrated
OWN = "own_relation"


def mark(report: Report, dumps: dict, ents: dict, walker) -> list[Row]:
    """Mark the rows that are their own culprits (module docstring); returns them."""
    if report.metric != "rel_rms":
        return []
    from inkling_probe.compare.diagnose import explain_row

    tp = tuple(sorted({d.world_size for d in dumps.values() if d is not None}))
    marked, examined = [], 0
    for row, feeders in feeders_of(report.rows):  # every guessed feeder, not only the 8 the row lists
        if not _candidate(row) or not _screened(row):
            continue
        tainted = [f for f in feeders if f.status != "skipped" and f.score >= DECAY]
        if not tainted:
            continue
        examined += 1
        if examined > MAX_EXAMINED:
            break
        ident = (row.key, row.step, row.call)
        if _settled(row, tainted, walker.spread.get(ident), _head_dim(ents, ident)):
            continue  # nothing explain can find would mark it: not read again
        masked = bool(walker.masks.get(ident))
        for f in explain_row(row, dumps, ents, walker, tp):
            if _holds(f, masked) and not any(shows(t, f, row) for t in tainted):
                row.born = OWN
                row.note = join_notes(row.note, f"its own error: {f.summary}; its guessed inputs "
                                      f"({', '.join(t.key for t in tainted[-3:])}) do not show it")
                marked.append(row)
                break
    return marked


def _settled(row: Row, tainted: list[Row], spread: bool | None, head_dim) -> bool:
    """No finding of explain's marks the row, whatever its details: every relation that may hold at
    it is one some tainted feeder shows (:func:`shows`). ``spread`` (None: not known) says the row's
    metrics are over the arrays explain reads and whether its divergence is spread (:func:`spread`)."""
    ok = [t for t in tainted if t.metrics is not None and not t.metrics.nonfinite_mismatch]
    m = row.metrics
    own = spread is not None  # the row's metrics are over explain's arrays
    ratio = (own and 1.0 - m.cosine > PARALLEL_SLACK * row.threshold ** 2 + COSINE_ROUNDING) \
        or any(_parallel(t) for t in ok)
    # a permutation undone to within the noise keeps the norm to within it: |rms_c - rms_r| <= noise rms_r
    finite = not (m.ref_nan or m.ref_inf or m.cand_nan or m.cand_inf)
    permutation = (own and finite and not _rms_kept(row)) \
        or any(tuple(t.shape) == tuple(row.shape) and _rms_kept(t) for t in ok)
    confinement = (bool(spread) and not head_dim) or len(ok) < len(tainted)
    return ratio and permutation and confinement


# explain's constant ratio needs tan(angle) <= 2 noise, so 1 - cos <= 2 noise^2: excluded past 4x that
# (the row's cosine and explain's differ by rounding only, COSINE_ROUNDING at most)
PARALLEL_SLACK = 8.0
COSINE_ROUNDING = 1e-12
SPREAD_SLACK = 1.0 + 1e-6  # explain's confined computes the same e_i in another order: ulps apart


def spread(row_errors: np.ndarray, columns: tuple, noise: float) -> bool:
    """The divergence of a ``[rows, width]`` pair is on more than half the token rows and more than
    half the positions within a row, past explain's confined margin (``columns``: measure.py's per-position
    sums of squared differences over some of the rows, and the total rr): explain's confined
    (compare/explain/confined.py) finds nothing there. Sums over some rows are at most the whole's,
    so a position found off here is off there too."""
    dd, total = columns
    if not total > 0 or not noise > 0:
        return False
    margin, longest = _confined()
    off = margin * noise * SPREAD_SLACK  # e_i past it is off (e_i as confined.diverged_indices has it)

    def over_half(bad: np.ndarray) -> bool:  # [n] off or not
        n = len(bad)
        return n < 2 or n > longest or int(np.count_nonzero(bad)) > n // 2
    # rows: e_i = row_errors; positions: e_j = sqrt(dd_j n / total) > off, squared
    return over_half(np.asarray(row_errors) > off) and over_half(dd * len(dd) > off * off * total)


@functools.cache
def _confined() -> tuple[float, int]:
    """explain's confined margin and the longest dim it sums (imported when first needed)."""
    from inkling_probe.compare.explain.confined import MARGIN
    from inkling_probe.compare.explain.stats import MAX_INDEX

    return MARGIN, MAX_INDEX


def _head_dim(ents: dict, ident: tuple):
    e = ents.get("reference", {}).get(ident)
    return (e.first.get("meta") or {}).get("head_dim") if e is not None else True


def _candidate(row: Row) -> bool:
    """Diverged, unborn, compared with the reference, a value (not a decision), feeders guessed."""
    return (row.status == "diverged" and not row.born and row.against == "reference" and not row.decision
            and not any(".in." in f for f in row.feeders))


def _screened(row: Row) -> bool:
    """Could a relation hold? Decided from the row's metrics, without reading data."""
    m, noise = row.metrics, row.threshold
    if m is None or m.nonfinite_mismatch or not noise > 0:
        return False
    return (_parallel(row) or _rms_kept(row) or m.outside <= CONCENTRATED
            or _rows_off(row.token_errors, noise) is not None)


def _parallel(row: Row) -> bool:
    m = row.metrics
    return (m is not None and not m.nonfinite_mismatch and m.numel >= MIN_VALUES
            and 1.0 - m.cosine <= 2 * row.threshold ** 2)


def _rms_kept(row: Row) -> bool:
    m = row.metrics
    return (m is not None and not m.nonfinite_mismatch and m.ref_rms > 0
            and abs(m.cand_rms - m.ref_rms) <= 2 * row.threshold * m.ref_rms)


def _rows_off(errors, allowance: float) -> list[int] | None:
    """Token rows off past MARGIN x the allowance when at most half are, else None."""
    if not errors or len(errors) < 4:
        return None
    e = np.asarray(errors)
    bad = np.flatnonzero(e > MARGIN * allowance)
    return bad.tolist() if 0 < len(bad) <= len(e) // 2 else None


def _holds(f, masked: bool) -> bool:
    """A finding that is an exact relation at the row (token-row confinement needs unmasked rows)."""
    if f.name in ("constant_ratio", "layout_permutation"):
        return True
    if f.name != "confined" or f.evidence.get("what") == "experts":
        return False
    return not (masked and f.evidence.get("what") == "token rows")


def shows(feeder: Row, finding, row: Row) -> bool:
    """Could ``feeder``'s error have made ``row`` hold ``finding``? True when it might."""
    m = feeder.metrics
    if m is None or m.nonfinite_mismatch:
        return finding.name == "confined"  # a decision or a non-finite feeder can pick rows, not scale
    if finding.name == "constant_ratio":
        return _parallel(feeder)
    if finding.name == "layout_permutation":
        return tuple(feeder.shape) == tuple(row.shape) and _rms_kept(feeder)
    if finding.evidence.get("what") != "token rows":
        return m.outside <= CONCENTRATED
    return _reaches_rows(feeder, finding.evidence["indices"], len(row.token_errors or []))


def _reaches_rows(feeder: Row, rows: list[int], n: int) -> bool:
    e = feeder.token_errors
    if not e or len(e) != n or not rows:
        return True  # no comparable token rows: it might
    e = np.asarray(e)
    off = e > MARGIN * feeder.threshold
    return not off[: min(rows)].any() and bool(off[: max(rows) + 1].any())

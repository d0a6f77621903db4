"""The one judge: how every row kind gets its allowance, its score and its status.

Every row compare builds is judged here, whatever its kind:

- **value rows** (a token-major tensor, a plain integer key, a decode step's key, one modality's
  rows) and **expert slots** (per-expert calls paired through the routing decision,
  compare/experts.py) go through :meth:`Judge.value`: the key's allowance from the control's floor
  (:meth:`Judge.allowance`), widened by a changed decision's reach (compare/reach.py), the status,
  then each token row against its own allowance (:meth:`Judge.rows`);
- **decisions** (routing ids, compare/routing.py) are changed-token fractions:
  :meth:`Judge.decision`, the same allowance with a control's zero as evidence (decisions are
  discrete: a control that changed none says none is expected);
- **control-only keys** (candidate vs control, e.g. quantization scales): :meth:`Judge.allowance`
  without a floor, then :meth:`Judge.status`.

The rule itself is :func:`inkling_probe.compare.floor.threshold` (its reasons are there); this module
binds it to one comparison's metric, user threshold and K. Nothing else computes an allowance.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare import floor
from inkling_probe.compare.measure import Measured
from inkling_probe.compare.report import Row, join_notes, score_of

K_ROW = 3.0  # a token row diverges past K_ROW x its allowance (rows fluctuate more than tensors); a key
# of one token row (a decode step's) is that row, and gets its row's allowance (unless the user set one)
MIN_ROW_VALUES = 16  # rows narrower than this are too noisy to judge alone (top-k weights, gammas)
SCALE_STEPS = 1.0  # a key scaled along its own values by more than this many epsilons of its coarsest
# dtype (and K x the control's own scale) diverges: rounding moves values both ways; a systematic factor
# of one ulp at 1 is the most a biased rounding gives (bf16: 0.0078; benign long MoE pairs at most 0.0048)
SCALE_Z = 4.0  # ... and by more than SCALE_Z x what its error's size gives by chance along the values:
# rel_rms / sqrt(token rows) (an error shared within a row, as rounding a row's norm is: measured on benign
# long MoE bf16 pairs up to 4.7 x rel_rms / sqrt(rows) is out of reach only with the epsilon floor)
LOOSE = 3.0  # a row allowed more than LOOSE x its allowance without a changed decision's reach is judged
# loosely: a fault smaller than that reach would not show there (coverage counts it; the verdict says so)


def scale_of(m) -> float | None:
    """``<c - r, r> / <r, r>`` from a pair's metrics (cosine x cand_rms / ref_rms - 1); None without."""
    if m is None or not m.ref_rms or not np.isfinite(m.cosine):
        return None
    return float(m.cosine * m.cand_rms / m.ref_rms - 1.0)


class Judge:
    """One comparison's allowances: ``metric``, the ``user``'s threshold (or None), ``k`` x the floor."""

    def __init__(self, metric: str, user: float | None, k: float):
        self.metric, self.user, self.k = metric, user, k

    # -- the allowance of one key ------------------------------------------------------------------
    def allowance(self, floor_: float | None, default: float, minimum: float = 0.0, *,
                  decision: bool = False) -> float:
        """The one threshold rule (floor.threshold) with this comparison's user threshold and K."""
        return floor.threshold(floor_, default, self.user, self.k, minimum, decision=decision)

    def default(self, precision, depth: int, integer: bool = False) -> float:
        """The no-control allowance: the dtype default (0 for integers and for max_abs)."""
        if self.metric == "max_abs" or integer:
            return 0.0
        return floor.default_threshold(precision, depth, self.metric)

    def minimum(self, depth: int, dtypes) -> float:
        """The absolute minimum under a control (floor.min_allowance): ``dtypes`` the key's own and
        the precision its inputs ran in."""
        return floor.min_allowance(depth, self.metric, dtypes)

    # -- the verdict of one row --------------------------------------------------------------------
    def status(self, row: Row, m: Measured) -> None:
        """Score and status from the row's error and threshold (or the measurement's own failure)."""
        if m.status == "shape":
            row.status, row.score, row.error = "shape", float("inf"), None
            row.note = m.note
            return
        if m.status == "unreadable":
            row.status, row.score = "unreadable", 0.0
            row.note = m.note
            return
        row.score = score_of(row.error, row.threshold)
        exact = m.status == "exact" or (m.metrics is not None and m.metrics.exact)
        row.status = "diverged" if row.score > 1.0 else ("exact" if exact else "ok")

    def value(self, row: Row, m: Measured, ctl: Measured | None, *, precision, integer: bool, width: int,
              reach: np.ndarray | None = None, own: np.ndarray | None = None, aside_note: str = "",
              shared=None) -> None:
        """The one row-judging sequence of value rows and expert slots.

        ``ctl``: the control's measurement of the same rows (None: no control); ``width``: values per
        token row; ``reach`` ``[n]`` the allowance a changed decision adds to each judged row and
        ``own`` ``[n]`` its share spread over the tensor (compare/reach.py), None where none reaches;
        ``aside_note``: what the caller set aside, said after the reach; ``shared``: set-aside rows
        both sides reached by the same decisions (compare/shared_decisions.py), judged against the
        control's error on each."""
        row.metrics, row.error, row.note = m.metrics, m.error, m.note
        row.floor = ctl.error if ctl is not None and ctl.status in ("ok", "exact") else None
        default = self.default(precision, row.depth, integer)
        minimum = self.minimum(row.depth, [row.ref_dtype, row.cand_dtype, precision])  # inputs' rounding too
        row.threshold = base = self.allowance(row.floor, default, minimum)
        if self.user is None and m.token_rows == 1 and width >= MIN_ROW_VALUES and m.row_errors is not None \
                and len(m.row_errors) == 1:  # one token row (a decode step's) fluctuates as a row, not a tensor
            row.threshold = max(row.threshold, float(self._row_allowance(row, m, ctl, base)[0]))
        if reach is not None:
            row.reach = float(reach.max())
            row.carry_score = score_of(row.error, row.threshold)  # the score without the reach
            if self.metric == "rel_rms" and own is not None:  # rel_rms^2 is the mean of the rows' e_i^2
                row.threshold = float(np.hypot(row.threshold, np.sqrt(np.mean(own ** 2))))
            row.note = join_notes(row.note, f"rows from {int(np.flatnonzero(reach)[0])} allowed up to "
                                            f"{row.reach:.3g} for a changed decision's reach")
        row.note = join_notes(row.note, aside_note)
        self.status(row, m)
        if m.row_errors is not None and len(m.row_errors) and row.status in ("ok", "diverged") \
                and width >= MIN_ROW_VALUES:
            self.rows(row, m, ctl, reach, base)
        elif reach is not None and row.threshold > LOOSE * base:  # judged as a whole, loosely
            row.rows_loose = int(m.token_rows or 1)
        if shared is not None and row.status in ("exact", "ok", "diverged") and width >= MIN_ROW_VALUES:
            self.shared_rows(row, m, shared, base)
        if ctl is not None and row.status == "ok" and not integer and width >= MIN_ROW_VALUES \
                and self.user is None and self.metric == "rel_rms":
            self.scaled(row, m, ctl, precision, own, width)

    def scaled(self, row: Row, m: Measured, ctl: Measured, precision, own=None, width: int = 1) -> None:
        """The key's error along the reference's own values: ``s = <c - r, r> / <r, r>``, the factor
        the candidate applies to the reference as a whole (x(1 + s)). Rounding and a benign twin move
        values in every direction; a fault that scales (a weight, a norm, an expert, some rows) moves
        them along the values, where the error's size alone can hide under a noisy control (long MoE
        bf16: every expert x1.04 at 0.44 of the allowance, a 0.04 scale against the control's 0.002).
        Allowed K x the control's own scale, at least SCALE_STEPS epsilons of the coarsest dtype and
        SCALE_Z x the scale its error's size gives by chance (rel_rms / sqrt(token rows)), and
        the part along the values of what a changed decision's reach may carry (``own`` ``[n]``: its
        error in no particular direction projects 1/sqrt(width) of itself onto a row of ``width``)."""
        s, s_ctl = scale_of(m.metrics), scale_of(ctl.metrics) if ctl.status in ("ok", "exact") else None
        if s is None or s_ctl is None:
            return
        eps = floor.precision_rank(floor.coarsest(row.ref_dtype, row.cand_dtype, precision))
        chance = SCALE_Z * m.metrics.rel_rms / np.sqrt(max(m.token_rows or 1, 1))  # an error in no direction
        allow = max(self.k * abs(s_ctl), SCALE_STEPS * eps, chance)
        if own is not None and len(own):  # a flip's carried error, in no particular direction: its part
            allow = float(np.hypot(allow, np.sqrt(np.mean(own ** 2) / max(width, 1))))  # along r
        score = abs(s) / allow if allow > 0 else (np.inf if s else 0.0)
        if score > max(row.score, 1.0):
            row.score, row.status = float(score), "diverged"
            row.note = join_notes(row.note, f"scaled x{1 + s:.4g} along the reference's own values (the control: "
                                            f"x{1 + s_ctl:.4g}; allowed {allow:.2g})")

    def shared_rows(self, row: Row, m: Measured, shared, base: float) -> None:
        """Rows set aside on both sides after the same decisions, each against the control's own
        error on it (compare/shared_decisions.py); ``base``: the key's allowance before any reach."""
        dtypes = [row.ref_dtype, row.cand_dtype]
        scale = m.row_scale[shared.rows] if m.row_scale is not None and len(m.row_scale) > max(shared.rows) else None
        allow = floor.row_allowance(  # [len(rows)]
            len(shared.rows), base, self.k, K_ROW, shared.ctl, (), self.minimum(row.depth, dtypes),
            floor.rounding_allowance(dtypes) if self.metric == "rel_rms" else 0.0, scale)
        e = shared.cand
        scores = np.where(allow > 0, e / np.where(allow > 0, allow, 1.0), np.where(e > 0, np.inf, 0.0))
        row.note = join_notes(row.note, f"{len(shared.rows)} of them judged against the control's own error "
                                        "there (the same decisions on both sides)")
        if row.status == "exact" and np.any(e > 0):
            row.status = "ok"
        if not scores.size or scores.max() <= max(row.row_score or 0.0, 1.0):
            row.row_score = max(row.row_score or 0.0, float(scores.max()) if scores.size else 0.0)
            return
        bad = [shared.rows[i] for i in np.flatnonzero(scores > 1.0)]
        row.bad_rows = sorted(set(row.bad_rows or []) | set(bad))
        row.row_score = float(scores.max())
        if row.row_score > row.score:
            row.score = row.row_score
            row.status = "diverged"
            row.note = join_notes(row.note, f"rows {bad[:8]} over allowance (judged against the control's)")

    def rows(self, row: Row, m: Measured, ctl: Measured | None, reach=None, base: float | None = None) -> None:
        """Token rows judged on their own: a divergence confined to a few rows is not averaged away;
        ``reach`` ``[n]`` widens the rows a changed decision can reach (reach.py); ``base``: the key's
        allowance before the reach (rows allowed over LOOSE x theirs without it are judged loosely)."""
        e = m.row_errors  # [n]
        allowance = lambda key_allowance: self._row_allowance(row, m, ctl, key_allowance)  # [n]
        if len(e) == 1 and base is not None and reach is None:  # a one-row key's allowance is already its row's (value)
            allow = allowance(base)
        elif reach is not None and reach.shape == e.shape:  # each row its own reach, never the tensor's share of it
            own = allowance(row.threshold if base is None else base)  # [n] without the reach
            allow = np.hypot(own, reach)
            row.rows_loose = int(np.count_nonzero(allow > LOOSE * own))
        else:
            allow = allowance(row.threshold)
        scores = np.where(allow > 0, e / np.where(allow > 0, allow, 1.0), np.where(e > 0, np.inf, 0.0))
        row.token_errors = [float(x) for x in e[:4096]]
        if scores.size:
            row.row_score = float(scores.max())
            row.bad_rows = np.flatnonzero(scores > 1.0).tolist()
        if row.row_score > row.score:
            row.score = row.row_score
            if row.score > 1.0 and row.status != "exact":
                row.status = "diverged"
                row.note = join_notes(row.note, f"rows {row.bad_rows[:8]} over allowance")

    def _row_allowance(self, row: Row, m: Measured, ctl: Measured | None, key_allowance: float) -> np.ndarray:
        """``[n]`` each token row's own allowance (floor.row_allowance) under a key allowance."""
        e = m.row_errors
        has_ctl = ctl is not None and ctl.row_errors is not None and ctl.row_errors.shape == e.shape
        dtypes = [row.ref_dtype, row.cand_dtype]
        return floor.row_allowance(
            len(e), key_allowance, self.k, K_ROW, ctl.row_errors if has_ctl else None,
            (ctl.masked or ()) if has_ctl else (), self.minimum(row.depth, dtypes),
            floor.rounding_allowance(dtypes) if self.metric == "rel_rms" else 0.0, m.row_scale)

    def decision(self, row: Row, error: float, ctl_fraction: float | None, default: float, changed: bool) -> None:
        """A decision's row: ``error`` the fraction of token rows it changed (steps so far),
        ``ctl_fraction`` the control's (None: no control), ``default`` the fraction allowed without
        one; ``changed``: whether any token changed at this step."""
        row.error, row.floor = error, ctl_fraction
        row.threshold = self.allowance(ctl_fraction, default, decision=True)
        row.score = score_of(row.error, row.threshold) if row.error else 0.0
        row.status = "diverged" if row.score > 1.0 else ("exact" if not changed else "ok")

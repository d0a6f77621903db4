"""Walks the aligned pairs in execution order, measuring each with the state that came before:
upstream precision, layer depth, changed decisions (routing flips, decoded tokens), call structure.

State kept per dump side (candidate, control): the tokens whose decision changed in each step
(:mod:`.reach`). A changed token's own rows are set aside (take the reference's values) in every key
after its decision in its step; every other row stays judged, the rows the flipped token can reach
(later positions, later keys) against an allowance widened by what it can carry there (reach.py). Keys whose rows are not those tokens (dispatch order, ``[T*k, ...]``) after a
change are not comparable and are skipped with a note, never compared by index. Every row says how
much of its key was judged (:mod:`.coverage`).
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare import coverage, floor, relations, steps
from inkling_probe.compare.align import Entry, Pair, layer_of
from inkling_probe.compare.experts import ExpertCalls
from inkling_probe.compare.measure import Measured, load, measure, token_rows
from inkling_probe.compare.ranks import check_replicated
from inkling_probe.compare.report import Report, Row, join_notes, score_of
from inkling_probe.compare.routing import RoutingSteps
from inkling_probe.compare.side import Side
from inkling_probe.compare.values import as_float64, is_integer
from inkling_probe.errors import ProbeError
from inkling_probe.settings import matches_any

# Integer keys that are routing decisions by name: transformers' MoE routers return (logits,
# weights, ids) and pass the ids to their experts. Only integer tensors matching these count.
DEFAULT_DECISIONS = ("*.mlp.gate.2", "*.block_sparse_moe.gate.2", "*.mlp.experts.in.1",
                     "*.block_sparse_moe.experts.in.1")
K_ROW = 3.0
MIN_ROW_VALUES = 16  # rows narrower than this are too noisy to judge alone (top-k weights, gammas)  # a token row diverges past K_ROW x its allowance (rows fluctuate more than tensors)


class Walker(RoutingSteps, ExpertCalls):
    """Builds one :class:`Row` per aligned pair (and the control-only rows)."""

    def __init__(self, dumps, ents, report: Report, *, metric, user, k, decision_globs, batch_rows):
        self.dumps, self.ents, self.report = dumps, ents, report
        self.metric, self.user, self.k = metric, user, k
        self.decision_globs, self.batch_rows = decision_globs, batch_rows
        self.cand, self.ctl = Side(), Side()
        self.masks: dict[tuple, list[int]] = {}  # (key, step, call) -> rows set aside in the candidate
        self.spread: dict[tuple, bool] = {}  # (key, step, call) of a diverged row measured with its columns
        # -> its divergence is on more than half the indices of every dim (compare/relations.py)
        self.call_counts = {label: _call_counts(e) for label, e in ents.items()}
        self.not_comparable: list[str] = []

    # -- one pair ------------------------------------------------------------------------------
    def row(self, p: Pair) -> Row | None:
        ref_e, cand_e = p.ref, p.cand
        if cand_e is None or self._not_comparable(p, self.cand, "candidate"):
            pl = self._expert_plan(p, self.cand, "candidate")  # per-expert calls (compare/experts.py)
            if pl is not None:
                layer, depth, precision = self.cand.advance(p.key, p.step, [ref_e.dtype])
                return self._expert_row(p, pl, precision, depth, layer)
            if cand_e is None:
                return None  # a call the candidate lacks, not paired by expert: listed as only in the reference
        dtypes = [ref_e.dtype, cand_e.dtype]
        layer, depth, precision = self.cand.advance(p.key, p.step, dtypes)
        row = Row(p.key, p.step, p.call, ref_e.key, cand_e.key, ref_e.global_shape(), ref_e.dtype, cand_e.dtype,
                  layer=layer, depth=depth, decision=self.is_decision(p.key, ref_e, cand_e))
        why = self._not_comparable(p, self.cand, "candidate")
        if why:
            row = self._skip(row, why)
            coverage.cover(row, token_rows(p.ref), None, whole="not comparable")
            return row
        if row.decision:
            self._decision_row(row, p)
            coverage.cover(row, token_rows(p.ref), None)
        else:
            self._value_row(row, p, precision, depth)
        if row.status == "unreadable":
            coverage.cover(row, token_rows(p.ref), None, whole="unreadable")
        if steps.is_logits(p.key) and self.batch_rows == (None, None):
            self._decoded(row, p)
        for label, e in (("reference", ref_e), ("candidate", cand_e), ("control", self._ctl_entry(p))):
            if e is not None:
                self.report.rank_findings += check_replicated(self.dumps[label], e, label, p.key,
                                                              self._default(precision, depth))
        return row

    def is_decision(self, key: str, *es: Entry) -> bool:
        if any((e.first.get("meta") or {}).get("kind") == "decision" for e in es):
            return True
        if self.decision_globs and matches_any(key, self.decision_globs):
            return True
        return bool(es) and all(is_integer(e.dtype) for e in es) and matches_any(key, DEFAULT_DECISIONS)

    def _ctl_entry(self, p: Pair) -> Entry | None:
        return self.ents.get("control", {}).get((p.key, p.step, p.call))

    def _not_comparable(self, p: Pair, side: Side, label: str) -> str:
        ident = (p.key, p.step)
        n_ref, n_other = self.call_counts["reference"].get(ident), self.call_counts[label].get(ident)
        if n_ref != n_other:
            return f"called {n_ref} time(s) in the reference, {n_other} in the {label}: not compared by index"
        if self.is_decision(p.key, p.ref):
            return ""
        n_rows, changed = side.changed_in(p.step)
        rows = token_rows(p.ref)
        if changed and rows is not None and rows != n_rows:
            return (f"{rows} rows are not the {n_rows} tokens after a routing change "
                    "(dispatch order?): not compared by index")
        shape = p.ref.global_shape()
        routed = side.routed.get((p.step, layer_of(p.key)))
        if routed and rows is None and len(shape) >= 2 and not is_integer(p.ref.dtype):
            if changed or shape[0] == routed[0] * routed[1]:
                return (f"rows [{shape[0]}, ...] are in dispatch order, not tokens, in a routed layer"
                        + (" after a routing change" if changed else "") + ": not compared by index")
        return ""

    def _skip(self, row: Row, why: str) -> Row:
        row.status, row.score, row.note = "not_comparable", 0.0, why
        self.not_comparable.append(row.key)
        return row

    # -- float (and plain integer) keys ---------------------------------------------------------
    def _value_row(self, row: Row, p: Pair, precision, depth) -> None:
        rtol = floor.base_threshold(precision)
        m = measure(self.dumps["reference"], p.ref, self.dumps["candidate"], p.cand, self.metric, rtol,
                    self.cand.set_aside(p.step, row.layer), self.batch_rows, realign=self._realigner(p, self.cand))
        ctl = self._control_measure(p, precision, row.layer)
        row.metrics, row.error, row.note = m.metrics, m.error, m.note
        row.floor = ctl.error if ctl is not None and ctl.status in ("ok", "exact") else None
        default = self._default(precision, depth, integer=is_integer(p.ref.dtype))
        minimum = floor.min_allowance(depth, self.metric, [p.ref.dtype, p.cand.dtype, precision])  # inputs' rounding too
        row.threshold = floor.threshold(row.floor, default, self.user, self.k, minimum)
        width = int(np.prod(p.ref.global_shape())) // max(m.token_rows or 1, 1)
        scale = float(p.ref.first.get("rms") or 0.0) * float(np.sqrt(max(width, 1)))  # an average row's norm
        reach = self.cand.reach.allowance(p.key, p.call, p.step, row.layer, m.token_rows, width, scale) \
            if m.token_rows else None
        if reach is not None:
            row.reach = float(reach.max())
            row.carry_score = score_of(row.error, row.threshold)  # the score without the reach
            if self.metric == "rel_rms":  # rel_rms^2 is the mean of the rows' e_i^2
                tensor = self.cand.reach.own  # [n] the share spread out (reach.py)
                row.threshold = float(np.hypot(row.threshold, np.sqrt(np.mean(tensor ** 2))))
            row.note = join_notes(row.note, f"rows from {int(np.flatnonzero(reach)[0])} allowed up to "
                                            f"{row.reach:.3g} for a changed decision's reach")
        if m.masked:
            self.masks[(p.key, p.step, p.call)] = m.masked
            row.note = join_notes(row.note, f"{len(m.masked)} token row(s) set aside (a changed decision's own)")
        self._status(row, m)
        if m.row_errors is not None and row.status in ("ok", "diverged") and width >= MIN_ROW_VALUES:
            self._rows_judged(row, m, ctl, reach)
        self.cand.reach.observe(p.key, p.call, p.step, m.token_rows, width, m.row_errors, m.masked,
                                m.masked_errors, row.diverged, scale)
        if row.status == "diverged" and m.columns is not None and m.row_errors is not None:
            self.spread[(p.key, p.step, p.call)] = relations.spread(m.row_errors, m.columns, row.threshold)
        coverage.cover(row, token_rows(p.ref), m.token_rows, len(m.masked or []))

    def _control_measure(self, p: Pair, precision, layer=None) -> Measured | None:
        ctl = self._ctl_entry(p)
        if ctl is None:
            if "control" in self.ents:
                self.report.notes.append(f"control lacks {p.key} step {p.step}: dtype default threshold used")
            return None
        self.ctl.advance(p.key, p.step, [p.ref.dtype, ctl.dtype])
        if self._not_comparable(p, self.ctl, "control"):
            return None
        return measure(self.dumps["reference"], p.ref, self.dumps["control"], ctl, self.metric,
                       floor.base_threshold(precision), self.ctl.set_aside(p.step, layer), (self.batch_rows[0], None),
                       realign=self._realigner(p, self.ctl))

    def _rows_judged(self, row: Row, m: Measured, ctl: Measured | None, reach=None) -> None:
        """Token rows judged on their own: a divergence confined to a few rows is not averaged away;
        ``reach`` ``[n]`` widens the rows a changed decision can reach (reach.py)."""
        e = m.row_errors  # [n]
        base = row.threshold
        has_ctl = ctl is not None and ctl.row_errors is not None and ctl.row_errors.shape == e.shape
        dtypes = [row.ref_dtype, row.cand_dtype]
        allow = floor.row_allowance(len(e), base, self.k, K_ROW, ctl.row_errors if has_ctl else None,  # [n]
                                    (ctl.masked or ()) if has_ctl else (),
                                    floor.min_allowance(row.depth, self.metric, dtypes),
                                    floor.rounding_allowance(dtypes) if self.metric == "rel_rms" else 0.0, m.row_scale)
        if reach is not None and reach.shape == e.shape:
            allow = np.hypot(allow, reach)
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

    def _status(self, row: Row, m: Measured) -> None:
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

    def _default(self, precision, depth, integer: bool = False) -> float:
        if self.metric == "max_abs" or integer:
            return 0.0
        return floor.default_threshold(precision, depth, self.metric)

    # -- the token a step decodes (compare/steps.py) -------------------------------------------
    def _decoded(self, row: Row, p: Pair) -> None:
        """A different decoded token: the next step's rows are its own (set aside there)."""
        nxt = self._next_step(p)
        if nxt is None:
            return
        step_next, n_next = nxt
        for label, side, other in (("candidate", self.cand, p.cand), ("control", self.ctl, self._ctl_entry(p))):
            if other is None:
                continue
            try:
                r, c = as_float64(load(self.dumps["reference"], p.ref)), as_float64(load(self.dumps[label], other))
            except (ProbeError, ValueError):
                continue
            if r.ndim < 2 or r.shape != c.shape:
                continue
            d = steps.decoded_change(r.reshape(-1, r.shape[-1]), c.reshape(-1, c.shape[-1]), n_next)
            if d is None or not d.changed or not self._fed(step_next, label, other, d.changed):
                continue
            side.note_changes(step_next, n_next, d.changed, None, "token")
            if label == "candidate":
                kinds = f"{len(d.near_tie)} near-tie, {len(d.clear)} clear-margin" if not d.unclassified else "unclassified"
                margins = ", ".join(f"gap {g:.3g} vs move {m:.3g}" for g, m in list(d.margins.values())[:3])
                row.note = join_notes(row.note, f"decoded token differs for {len(d.changed)} of {n_next} next-step "
                                                f"row(s) ({kinds}{'; ' + margins if margins else ''}): step "
                                                f"{step_next}'s rows are set aside")

    def _fed(self, step: int, label: str, like: Entry, rows) -> bool:
        """Whether the next step was fed the decoded tokens: its first recorded key (the embedding)
        differs on those rows by a whole row (another token), not by rounding. Teacher-forced
        decode steps feed fixed tokens, whatever the logits say."""
        first = min((e for (k, s, c), e in self.ents["reference"].items() if s == step), key=lambda e: e.seq,
                    default=None)
        if first is None:
            return True
        other = self.ents[label].get((self._mapped(first), step, first.call))
        if other is None:
            return True
        try:
            r, c = as_float64(load(self.dumps["reference"], first)), as_float64(load(self.dumps[label], other))
        except (ProbeError, ValueError):
            return True
        n = token_rows(first)
        if r.size != c.size or not n:
            return True
        r, c = r.reshape(n, -1), c.reshape(n, -1)
        rows = [t for t in rows if t < n]
        err = np.linalg.norm(c[rows] - r[rows], axis=1) / np.maximum(np.linalg.norm(r[rows], axis=1), 1e-30)
        return bool(np.any(err > steps.OTHER_TOKEN))

    def _mapped(self, e: Entry) -> str:
        """The mapped key of a reference entry (entries are keyed by mapped key)."""
        return next(k for (k, s, c), x in self.ents["reference"].items() if x is e)

    def _next_step(self, p: Pair) -> tuple[int, int] | None:
        later = sorted({s for (k, s, c) in self.ents["reference"] if k == p.key and s > p.step})
        if not later:
            return None
        e = self.ents["reference"].get((p.key, later[0], p.call))
        n = token_rows(e) if e is not None else None
        return (later[0], n) if n else None

    # -- keys only the control and the candidate hold ------------------------------------------
    def control_only_rows(self) -> list[Row]:
        """Candidate vs control for the keys the reference lacks (e.g. quantization scales)."""
        ctl = self.ents.get("control")
        if not ctl:
            return []
        ref = self.ents["reference"]
        side, out = Side(), []
        for ident, cand_e in sorted(self.ents["candidate"].items(), key=lambda kv: (kv[0][1], kv[1].seq, kv[0][2])):
            if ident in ref or ident not in ctl:
                continue
            key, step, call = ident
            layer, depth, precision = side.advance(key, step, [ctl[ident].dtype, cand_e.dtype])
            m = measure(self.dumps["control"], ctl[ident], self.dumps["candidate"], cand_e, self.metric,
                        floor.base_threshold(precision))
            row = Row(key, step, call, ctl[ident].key, cand_e.key, ctl[ident].global_shape(), ctl[ident].dtype,
                      cand_e.dtype, against="control", metrics=m.metrics, error=m.error, layer=layer,
                      depth=depth, note=m.note)
            row.threshold = floor.threshold(None, self._default(precision, depth, is_integer(cand_e.dtype)),
                                            self.user, self.k)
            self._status(row, m)
            out.append(row)
        return out

    def summary_notes(self) -> list[str]:
        if not self.not_comparable:
            return []
        keys = sorted(set(self.not_comparable))
        return [f"{len(self.not_comparable)} row(s) not comparable (skipped, not judged): {keys[:6]}"
                + (f" ... {len(keys) - 6} more keys" if len(keys) > 6 else "")]


def _call_counts(ents: dict) -> dict:
    out: dict = {}
    for (key, step, _call) in ents:
        out[(key, step)] = out.get((key, step), 0) + 1
    return out

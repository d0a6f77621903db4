"""Walks the aligned pairs in execution order, measuring each with the state that came before:
upstream precision, layer depth, changed decisions (routing flips, decoded tokens), call structure.

State kept per dump side (candidate, control): the tokens whose decision changed in each step
(:mod:`.reach`). A changed token's own rows are set aside (take the reference's values) in every key
after its decision in its step; every other row stays judged, the rows the flipped token can reach
(later positions, later keys) against an allowance widened by what it can carry there (reach.py). Keys whose rows are not those tokens (dispatch order, ``[T*k, ...]``) after a
change are not comparable and are skipped with a note, never compared by index. Every row says how
much of its key was judged (:mod:`.coverage`).

The walker holds its parts as objects sharing one :class:`~.walk_state.WalkState`: the judge
(:mod:`.judge`, every allowance), routing decisions (:mod:`.routing`), expert slots
(:mod:`.experts`) and decoded tokens (:mod:`.decoded`).
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare import coverage, floor, relations, steps
from inkling_probe.compare.align import Entry, Pair, layer_of
from inkling_probe.compare.decoded import DecodedTokens
from inkling_probe.compare.experts import ExpertRows
from inkling_probe.compare.judge import LOOSE, Judge
from inkling_probe.compare.measure import Measured, measure, token_rows
from inkling_probe.compare.ranks import check_replicated
from inkling_probe.compare.report import Report, Row
from inkling_probe.compare.routing import Routing
from inkling_probe.compare.side import Side
from inkling_probe.compare.shared_decisions import same_decision_rows
from inkling_probe.compare.tail_rows import Tail, TailRows, as_rows
from inkling_probe.compare.values import is_integer
from inkling_probe.compare.walk_state import WalkState


TIGHTER = {  # the command that makes a changed decision's consequences judged tightly, by its kind
    "routing": "the reference's routing forced (`inkling-probe run --force-routing REF_DUMP`; transformers: "
               "`inkling_probe.compare.force_hook.force_routing(model, REF_DUMP)`)",
    "token": "the reference's tokens forced (teacher-forced decode: `inkling-probe run --force-tokens REF_DUMP`; "
             "transformers: `inkling_probe.compare.force_tokens.force_tokens(model, REF_DUMP)`)",
}


class Walker:
    """Builds one :class:`Row` per aligned pair (and the control-only rows)."""

    def __init__(self, dumps, ents, report: Report, *, metric, user, k, decision_globs, batch_rows,
                 mixing_globs=()):
        self.state = WalkState(dumps, ents, batch_rows, decision_globs, list(mixing_globs))
        self.report, self.metric = report, metric
        self.judge = Judge(metric, user, k)
        self.routing = Routing(self.state, self.judge)
        self.experts = ExpertRows(self.state, self.judge)
        self.decoded = DecodedTokens(self.state)
        self.tails = TailRows()  # keys holding their step's last token rows (tail_rows.py)
        self.masks: dict[tuple, list[int]] = {}  # (key, step, call) -> rows set aside in the candidate
        self.spread: dict[tuple, bool] = {}  # (key, step, call) of a diverged row measured with its columns
        # -> its divergence is on more than half the indices of every dim (compare/relations.py)
        self.call_counts = {label: _call_counts(e) for label, e in ents.items()}

    @property
    def batch_rows(self) -> tuple:
        return self.state.batch_rows

    def is_decision(self, key: str, *es: Entry) -> bool:
        return self.state.is_decision(key, *es)

    # -- one pair ------------------------------------------------------------------------------
    def row(self, p: Pair) -> Row | None:
        s = self.state
        ref_e, cand_e = p.ref, p.cand
        if cand_e is None or self._not_comparable(p, s.cand, "candidate"):
            pl = self.experts.plan(p, s.cand, "candidate")  # per-expert calls (compare/experts.py)
            if pl is not None:
                layer, depth, precision = s.cand.advance(p.key, p.step, [ref_e.dtype])
                return self.experts.row(p, pl, precision, depth, layer)
            if cand_e is None:
                return None  # a call the candidate lacks, not paired by expert: listed as only in the reference
        dtypes = [ref_e.dtype, cand_e.dtype]
        layer, depth, precision = s.cand.advance(p.key, p.step, dtypes)
        row = Row(p.key, p.step, p.call, ref_e.key, cand_e.key, ref_e.global_shape(), ref_e.dtype, cand_e.dtype,
                  layer=layer, depth=depth, decision=s.is_decision(p.key, ref_e, cand_e))
        why = self._not_comparable(p, s.cand, "candidate")
        if why:
            row = s.skip(row, why)
            coverage.cover(row, token_rows(p.ref), None, whole="not comparable")
            return row
        if row.decision:
            self.routing.decision_row(row, p)
            coverage.cover(row, token_rows(p.ref), None)
        else:
            self._value_row(row, p, precision)
        if row.status == "unreadable":
            coverage.cover(row, token_rows(p.ref), None, whole="unreadable")
        if steps.is_logits(p.key) and s.batch_rows == (None, None):
            self.decoded.note(row, p)
        for label, e in (("reference", ref_e), ("candidate", cand_e), ("control", s.ctl_entry(p))):
            if e is not None:
                self.report.rank_findings += check_replicated(s.dumps[label], e, label, p.key,
                                                              self.judge.default(precision, depth))
        return row

    def _not_comparable(self, p: Pair, side: Side, label: str) -> str:
        ident = (p.key, p.step)
        n_ref, n_other = self.call_counts["reference"].get(ident), self.call_counts[label].get(ident)
        if n_ref != n_other:
            return f"called {n_ref} time(s) in the reference, {n_other} in the {label}: not compared by index"
        if self.state.is_decision(p.key, p.ref):
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

    # -- float (and plain integer) keys ---------------------------------------------------------
    def _value_row(self, row: Row, p: Pair, precision) -> None:
        s = self.state
        tail = self._tail(p)  # the step's last token rows only (lm_head under generate): tail_rows.py
        off = tail.offset if tail is not None else 0
        ref_e, cand_e = (as_rows(p.ref, tail), as_rows(p.cand, tail)) if tail is not None else (p.ref, p.cand)
        m = measure(s.dumps["reference"], ref_e, s.dumps["candidate"], cand_e, self.metric,
                    floor.base_threshold(precision), s.cand.set_aside(p.step, row.layer, off), s.batch_rows,
                    keep=tail is not None, realign=self.routing.realigner(p, s.cand))
        ctl = self._control_measure(p, precision, row.layer, tail)
        width = int(np.prod(p.ref.global_shape())) // max(m.token_rows or 1, 1)
        scale = float(p.ref.first.get("rms") or 0.0) * float(np.sqrt(max(width, 1)))  # an average row's norm
        reach = s.cand.reach.allowance(p.key, p.call, p.step, row.layer, m.token_rows, width, scale, off) \
            if m.token_rows else None
        aside = ""
        if m.masked:
            self.masks[(p.key, p.step, p.call)] = m.masked
            aside = f"{len(m.masked)} token row(s) set aside (a changed decision's own)"
        shared = same_decision_rows(s.cand, s.ctl, p.step, m, ctl, off)
        self.judge.value(row, m, ctl, precision=precision, integer=is_integer(p.ref.dtype), width=width,
                         reach=reach, own=s.cand.reach.own if reach is not None else None, aside_note=aside,
                         shared=shared)
        s.cand.reach.observe(p.key, p.call, p.step, m.token_rows, width, m.row_errors, m.masked,
                             m.masked_errors, row.diverged, scale, off)
        self.tails.seen(p, tail, m.token_dim, m.token_rows)
        if row.status == "diverged" and m.columns is not None and m.row_errors is not None:
            self.spread[(p.key, p.step, p.call)] = relations.spread(m.row_errors, m.columns, row.threshold)
        judged_aside = len(shared.rows) if shared is not None and row.status != "shape" else 0
        coverage.cover(row, token_rows(ref_e), m.token_rows, len(m.masked or []) - judged_aside)

    def _tail(self, p: Pair) -> Tail | None:
        """Pair ``p``'s rows as the last tokens of a step with a changed decision (tail_rows.py)."""
        s = self.state
        n_tokens = lambda: next((f.n_rows for side in (s.cand, s.ctl) for f in side.reach.flips  # noqa: E731
                                 if f.step == p.step and f.kind == "routing"), None)
        return self.tails.find(s.dumps["reference"], p, n_tokens, lambda: not s.cand.reach.mixes(p.key))

    def _control_measure(self, p: Pair, precision, layer=None, tail: Tail | None = None) -> Measured | None:
        s = self.state
        ctl = s.ctl_entry(p)
        if ctl is None:
            if "control" in s.ents:
                self.report.notes.append(f"control lacks {p.key} step {p.step}: dtype default threshold used")
            return None
        s.ctl.advance(p.key, p.step, [p.ref.dtype, ctl.dtype])
        if self._not_comparable(p, s.ctl, "control"):
            return None
        ref_e = as_rows(p.ref, tail) if tail is not None else p.ref
        ctl_e = as_rows(ctl, tail) if tail is not None else ctl
        return measure(s.dumps["reference"], ref_e, s.dumps["control"], ctl_e, self.metric,
                       floor.base_threshold(precision), s.ctl.set_aside(p.step, layer, tail.offset if tail else 0),
                       (s.batch_rows[0], None), keep=tail is not None, realign=self.routing.realigner(p, s.ctl))

    # -- keys only the control and the candidate hold ------------------------------------------
    def control_only_rows(self) -> list[Row]:
        """Candidate vs control for the keys the reference lacks (e.g. quantization scales)."""
        s = self.state
        ctl = s.ents.get("control")
        if not ctl:
            return []
        ref = s.ents["reference"]
        side, out = Side(), []
        for ident, cand_e in sorted(s.ents["candidate"].items(), key=lambda kv: (kv[0][1], kv[1].seq, kv[0][2])):
            if ident in ref or ident not in ctl:
                continue
            key, step, call = ident
            layer, depth, precision = side.advance(key, step, [ctl[ident].dtype, cand_e.dtype])
            m = measure(s.dumps["control"], ctl[ident], s.dumps["candidate"], cand_e, self.metric,
                        floor.base_threshold(precision))
            row = Row(key, step, call, ctl[ident].key, cand_e.key, ctl[ident].global_shape(), ctl[ident].dtype,
                      cand_e.dtype, against="control", metrics=m.metrics, error=m.error, layer=layer,
                      depth=depth, note=m.note)
            row.threshold = self.judge.allowance(None, self.judge.default(precision, depth, is_integer(cand_e.dtype)))
            self.judge.status(row, m)
            out.append(row)
        return out

    def summary_notes(self) -> list[str]:
        out = self._loose_notes()
        nc = self.state.not_comparable
        if not nc:
            return out
        keys = sorted(set(nc))
        return out + [f"{len(nc)} row(s) not comparable (skipped, not judged): {keys[:6]}"
                      + (f" ... {len(keys) - 6} more keys" if len(keys) > 6 else "")]

    def _loose_notes(self) -> list[str]:
        """Keys judged loosely after changed decisions, and the command that judges them tightly."""
        loose = [r for r in self.report.rows if r.rows_loose]
        if not loose:
            return []
        kinds = {f.kind for f in self.state.cand.reach.flips}
        how = [TIGHTER[k] for k in ("routing", "token") if k in kinds]
        keys = sorted({r.key for r in loose}, key=lambda k: next(i for i, r in enumerate(loose) if r.key == k))
        return [f"judged loosely: {sum(r.rows_loose for r in loose)} row(s) of {len(loose)} key row(s) "
                f"({', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}) allow more than {LOOSE:g}x their "
                "own allowance for a changed decision's reach (a fault smaller than that would not show there); "
                "judged tightly with " + " and ".join(how or ["the reference's decisions forced"])]


def _call_counts(ents: dict) -> dict:
    out: dict = {}
    for (key, step, _call) in ents:
        out[(key, step)] = out.get((key, step), 0) + 1
    return out

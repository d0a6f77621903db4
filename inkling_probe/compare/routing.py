"""The routing-decision part of the walk (an object the walker holds, compare/walker.py):
classify a decision's changed tokens against its router scores and the control's, reuse a decision
passed on (router output -> experts input), and compare per-token weights in their ids' order.
decisions.py holds the rules; docs/COMPARE.md section 4 the reasons.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare import decisions as dec
from inkling_probe.compare.align import Entry, Pair, layer_of
from inkling_probe.compare.conform import token_dim_of
from inkling_probe.compare.measure import Measured, load, measure
from inkling_probe.compare.judge import Judge
from inkling_probe.compare.report import Row, join_notes
from inkling_probe.compare.walk_state import WalkState
from inkling_probe.compare.values import as_float64, is_integer
from inkling_probe.errors import ProbeError

UNCLASSIFIED_MAX = 0.25  # without router scores or a control: the changed-token fraction allowed


class Routing:
    """Decision rows and what they leave in the walk's state (changed tokens, ids per layer)."""

    def __init__(self, state: WalkState, judge: Judge):
        self.s, self.judge = state, judge
        self._beside = None  # (step, call, layer, shape) -> decisions recorded there (built on first use)

    def realigner(self, p: Pair, side):
        """Per-token weights ``[T, k]`` beside a decision are compared in the order of their ids:
        experts returned in another order (``topk(sorted=False)``) are the same routing."""
        if is_integer(p.ref.dtype) or len(p.ref.global_shape()) != 2:
            return None
        ids = side.ids.get((p.step, layer_of(p.key))) or self._ids_beside(p, side)
        if ids is None or tuple(p.ref.global_shape()) != tuple(ids[0].shape):
            return None

        def realign(r, c):
            """Both in id order where that brings them closer (weights that follow their ids);
            as recorded otherwise (a tensor beside the ids that does not follow them)."""
            ra, ca = np.asarray(r.array, np.float64), np.asarray(c.array, np.float64)
            if ra.shape != ids[0].shape or ca.shape != ids[1].shape:
                return r, c, ""
            ro, co = np.argsort(ids[0], axis=-1, kind="stable"), np.argsort(ids[1], axis=-1, kind="stable")
            if np.array_equal(ro, co):
                return r, c, ""
            r2, c2 = np.take_along_axis(ra, ro, -1), np.take_along_axis(ca, co, -1)
            if np.nansum((c2 - r2) ** 2) >= np.nansum((ca - ra) ** 2):
                return r, c, ""
            return type(r)(r2, "float64"), type(c)(c2, "float64"), "compared in routing-id order"
        return realign

    def decision_row(self, row: Row, p: Pair) -> None:
        """Judge a decision key: the fraction of its tokens whose decision changed (clear margins
        where router scores tell, else every change), against the control's fraction (judge.py)."""
        got = self._classify(p, "candidate", self.s.cand)
        if isinstance(got, Measured):  # unreadable or shape
            self.judge.status(row, got)
            return
        d, scored = got
        ctl = None
        ce = self.s.ctl_entry(p)
        if ce is not None:
            self.s.ctl.advance(p.key, p.step, [p.ref.dtype, ce.dtype])
            c = self._classify(p, "control", self.s.ctl)
            ctl = c[0] if not isinstance(c, Measured) else None
        counted = d.clear if scored else d.unclassified
        t = self.s.cand.tally.setdefault((p.key, p.call), [0, 0])
        t[0] += len(counted)
        t[1] += d.token_rows
        ctl_frac = None
        if ctl is not None:  # tallied over the steps so far, as the candidate's is
            ctl_counted = ctl.clear if scored else ctl.unclassified
            tc = self.s.ctl.tally.setdefault((p.key, p.call), [0, 0])
            tc[0] += len(ctl_counted)
            tc[1] += ctl.token_rows
            ctl_frac = tc[0] / tc[1] if tc[1] else 0.0
        self.judge.decision(row, t[0] / t[1] if t[1] else 0.0, ctl_frac, 0.0 if scored else UNCLASSIFIED_MAX,
                            bool(d.changed))
        row.clear_flips = len(counted) if row.status == "diverged" else 0
        row.note = join_notes(row.note, d.note())
        if t[0] and t[1] != d.token_rows:
            row.note = join_notes(row.note, f"{t[0]} of {t[1]} token rows changed (steps so far)")

    def _classify(self, p: Pair, label: str, side):
        other = p.cand if label == "candidate" else self.s.ctl_entry(p)
        rows = (self.s.batch_rows[0], self.s.batch_rows[1] if label == "candidate" else None)
        m = measure(self.s.dumps["reference"], p.ref, self.s.dumps[label], other, "mismatch", 0.0, lambda n: None,
                    rows, keep=True)
        if m.status in ("unreadable", "shape"):
            return m
        n = m.token_rows if m.token_rows is not None else 1
        if m.status == "exact":
            side.flips[(p.key, p.step, p.call)] = dec.Decision(token_rows=n)
            shape = p.ref.global_shape()
            if shape:
                side.routed[(p.step, layer_of(p.key))] = (n, int(np.prod(shape)) // max(n, 1))
            side.same_ids[(p.step, layer_of(p.key))] = p.ref  # the ids, loaded if a per-expert key needs them
            return dec.Decision(token_rows=n), True
        r_ids = np.moveaxis(m.ref.array, m.token_dim, 0) if m.token_dim is not None else m.ref.array.reshape(1, -1)
        c_ids = np.moveaxis(m.cand.array, m.token_dim, 0) if m.token_dim is not None else m.cand.array.reshape(1, -1)
        prev = side.decided.get((p.step, layer_of(p.key)))
        if prev is not None and np.array_equal(prev[0], r_ids) and np.array_equal(prev[1], c_ids):
            return prev[2], prev[3]  # the same ids passed on (router output -> experts input)
        scores = self._scores(p, label, r_ids.shape[0], rows)
        selection = bool((p.ref.first.get("meta") or {}).get("selection"))
        d = dec.classify(r_ids, c_ids, *scores, selection=selection)
        side.flips[(p.key, p.step, p.call)] = d
        k = int(np.prod(r_ids.shape[1:])) if r_ids.ndim > 1 else 1
        side.routed[(p.step, layer_of(p.key))] = (r_ids.shape[0], k)
        side.ids[(p.step, layer_of(p.key))] = (r_ids, c_ids)
        side.same_ids.pop((p.step, layer_of(p.key)), None)
        side.decided[(p.step, layer_of(p.key))] = (r_ids, c_ids, d, scores[0] is not None)
        side.note_changes(p.step, d.token_rows, d.changed, layer_of(p.key))
        return d, scores[0] is not None

    def _scores(self, p: Pair, label: str, n_tokens: int, rows=(None, None)):
        """The router scores the decision was made from: the key its meta names (``scores=``), else
        the nearest float key before it in the same layer and step with one row per token; ``rows``:
        the batch rows compared (a batch's scores cut to the row its ids were cut to)."""
        key = (p.ref.first.get("meta") or {}).get("scores")
        ref_ents, other_ents = self.s.ents["reference"], self.s.ents[label]
        cands = [key] if key else [k for (k, s, c), e in sorted(ref_ents.items(), key=lambda kv: -kv[1].seq)
                                    if s == p.step and e.seq < p.ref.seq and layer_of(k) == layer_of(p.key)
                                    and not self.s.is_decision(k, e) and not is_integer(e.dtype)]
        for k in cands[:4]:
            re_, oe = ref_ents.get((k, p.step, p.call)), other_ents.get((k, p.step, p.call))
            if re_ is None or oe is None:
                continue
            try:
                if tuple(rows) != (None, None):  # the batch row, as the ids were cut
                    m = measure(self.s.dumps["reference"], re_, self.s.dumps[label], oe, "mismatch", 0.0,
                                lambda n: None, rows, keep=True)
                    if m.status in ("unreadable", "shape") or m.token_dim is None:
                        continue
                    rs, os_ = _rows_first(m.ref, m.token_dim), _rows_first(m.cand, m.token_dim)
                else:
                    rs = token_major(load(self.s.dumps["reference"], re_), re_)
                    os_ = token_major(load(self.s.dumps[label], oe), oe)
            except ProbeError:
                continue
            if rs is not None and os_ is not None and rs.shape == os_.shape and rs.shape[0] == n_tokens:
                return rs, os_
        return None, None

    def _ids_beside(self, p: Pair, side):
        """(reference ids, other ids) of a decision of the same step, layer and shape recorded
        after this key (transformers' routers return their weights before their ids)."""
        label = "candidate" if side is self.s.cand else "control"
        shape = tuple(p.ref.global_shape())
        if self._beside is None:  # indexed once: no scan of every entry per key
            self._beside = {}
            for (k, s, c), e in self.s.ents["reference"].items():
                self._beside.setdefault((s, c, layer_of(k), tuple(e.global_shape())), []).append((k, s, c, e))
        for k, s, c, e in self._beside.get((p.step, p.call, layer_of(p.key), shape), []):
            other = self.s.ents[label].get((k, s, c))
            if other is None or not self.s.is_decision(k, e, other):
                continue
            try:
                return (as_float64(load(self.s.dumps["reference"], e)).reshape(shape),
                        as_float64(load(self.s.dumps[label], other)).reshape(shape))
            except (ProbeError, ValueError):
                return None
        return None


def token_major(v, e: Entry) -> np.ndarray | None:
    """``[T, -1]`` float64 values of entry ``e`` with its token dim first, or None without one."""
    a = as_float64(v)
    td = token_dim_of(a.shape, e.first.get("token_dim", 0))
    return None if td is None else _rows_first(a, td)


def _rows_first(v, token_dim: int) -> np.ndarray:
    """``[T, -1]`` float64 of values ``v`` with its token dim first."""
    a = np.moveaxis(as_float64(v), token_dim, 0)
    return a.reshape(a.shape[0], -1)

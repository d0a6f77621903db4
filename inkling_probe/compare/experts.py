"""Rows in dispatch order (per-expert calls, ``[T*k, ...]`` slots): paired through the recorded decision.

An MoE layer's expert computation holds one row per *slot* (a token and one of its experts), in an
order the implementation picks: transformers' per-expert loop (``Qwen2MoeExperts``,
``MixtralExperts``, eager) calls the same modules once per expert that got tokens, in expert order,
with that expert's tokens (``torch.where(one_hot(ids)[e])``: slot-major, then token; other loops
keep token order); ``batched_mm`` makes one call of ``T*k`` rows in token order
(``repeat_interleave``); ``grouped_mm`` one call of ``T*k`` rows sorted by expert. Such rows are not
tokens: after a routing change, or between two layouts, they can not be compared by index. When
the layer's decision (ids ``[T, k]``) is recorded on both sides, every row's slot follows from it:

- a **layout** is a rule giving each call's rows their slots (:data:`LAYOUTS`); it fits one side
  when its call count and every call's row count are the ids'; when no layout fits a side, the key
  stays not comparable (its rows do not follow from the decision);
- a reference row pairs with the other side's row of the same slot ``(token, expert)`` (the input of
  expert ``e`` for token ``t`` is the same computation on both sides). Rows of tokens set aside (a
  changed decision's own, compare/reach.py) and slots one side does not hold are set aside;
- where several layouts fit (one call of ``T*k`` rows fits both one-call layouts), the pairing
  taken is the one under which the paired rows are closest: a wrong layout pairs different slots
  (errors of order 1), so it can not hide a fault, which shows under every layout;
- one call sorted by expert (``grouped_mm``: ``torch.sort`` is not stable) gives each row's expert
  but not its token: inside each expert group rows pair by content (nearest first), and of the
  group's rows the number the decision says are judged (tokens routed there on both sides, not
  set aside) is kept, the closest: a fault confined to the rows left out of one group can hide
  there (it shows at the expert sum, token-major);
- evidence: the paired rows must be at least ``1 / NULL_RATIO`` x closer (rms) than the same rows
  paired with the next slot's; else the rows do not follow the decision (random data, a layout
  not in :data:`LAYOUTS`, or a fault so gross nothing pairs) and the key stays not comparable.

Coverage (compare/coverage.py) counts the reference rows of each call judged and set aside; whether
a call is unchecked is decided on the key's slots over all its calls of the step: a fault reaching
a quarter of the tokens shows on the judged rows of every expert they reach.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare import coverage, floor
from inkling_probe.compare.align import layer_of
from inkling_probe.compare.judge import Judge
from inkling_probe.compare.measure import Measured, abs_tolerance, judged_metrics, load, row_errors_and_scale
from inkling_probe.compare.report import Row
from inkling_probe.compare.routing import token_major
from inkling_probe.compare.values import Values, is_integer
from inkling_probe.compare.walk_state import WalkState
from inkling_probe.errors import ProbeError


def _loop(order: str):
    def slots(ids: np.ndarray) -> list:
        out = []
        for e in sorted(int(x) for x in np.unique(ids) if x >= 0):
            if order == "slot":
                j, t = np.nonzero(ids.T == e)  # torch.where(one_hot(ids).permute(2, 1, 0)[e])
            else:
                t = np.flatnonzero((ids == e).any(axis=1))
            out.append(np.stack([t, np.full(len(t), e)], axis=1))
        return out
    return slots


def _flat(ids: np.ndarray) -> list:
    t = np.repeat(np.arange(ids.shape[0]), ids.shape[1])
    return [np.stack([t, ids.reshape(-1)], axis=1)]


def _grouped(ids: np.ndarray) -> list:
    """One call sorted by expert (``torch.sort``, not stable): the token inside a group is unknown (-1)."""
    e = np.sort(ids[ids >= 0].reshape(-1))
    return [np.stack([np.full(len(e), -1), e], axis=1)]


LAYOUTS = {"loop": _loop("slot"), "loop_token": _loop("token"), "flat": _flat, "grouped": _grouped}


NULL_RATIO = 0.5  # paired rows must be at least 2x closer (rms) than the same rows paired with other slots


@dataclass
class Plan:
    """How one reference call's rows pair with the other side's rows, per fitting layout pair."""

    pairings: list  # [(name, ref rows [m], other (call, row) [m, 2], tokens [m])]
    recorded: int  # reference rows of the call
    aside: int  # reference rows set aside (recorded - judged)
    key_recorded: int  # the key's reference rows over all its calls in the step
    key_aside: int  # the rows set aside over all its calls in the step
    expert: str = ""  # the call's expert(s), for notes


def _tokens_by_expert(ids: np.ndarray) -> dict:
    """expert -> the set of tokens routed to it (ids ``[T, k]``), in one pass."""
    out: dict = {}
    t, _ = np.nonzero(ids >= 0)
    for tok, e in zip(t.tolist(), ids[ids >= 0].tolist()):
        out.setdefault(int(e), set()).add(int(tok))
    return out


def hit(ids: np.ndarray) -> list:
    return sorted(int(x) for x in np.unique(ids) if x >= 0)


def fits(ids: np.ndarray, rows: list) -> dict:
    """name -> every call's ``[m, 2]`` (token, expert) slots, for the layouts that fit ``rows``."""
    out = {}
    for name, rule in LAYOUTS.items():
        slots = rule(ids)
        if len(slots) == len(rows) and all(r == len(s) for r, s in zip(rows, slots)):
            out[name] = slots
    return out


def plan(ref_ids: np.ndarray, other_ids: np.ndarray, ref_rows: list, other_rows: list, call: int,
         aside: set, memo: dict | None = None) -> Plan | None:
    """The pairings of reference call ``call``; None when the calls do not follow from the ids.

    ``ref_ids``/``other_ids`` ``[T, k]``; ``ref_rows``/``other_rows`` every call's row count (call
    order); ``aside`` the tokens set aside in this step; ``memo``: a dict kept over the calls of one
    key and step (what does not depend on the call is computed once: E calls of T x k ids)."""
    memo = {} if memo is None else memo
    if "ids" not in memo:
        as_ids = lambda a: np.asarray(a).reshape(np.asarray(a).shape[0], -1).astype(np.int64)
        memo["ids"] = (as_ids(ref_ids), as_ids(other_ids))
    ref_ids, other_ids = memo["ids"]
    if ref_ids.shape != other_ids.shape:
        return None
    if "fits" not in memo:
        memo["fits"] = (fits(ref_ids, ref_rows), fits(other_ids, other_rows))
    fr, fo = memo["fits"]
    if not fr or not fo or call >= len(ref_rows):
        return None
    if "tokens" not in memo:
        memo["tokens"] = (_tokens_by_expert(ref_ids), _tokens_by_expert(other_ids))
        memo["where"] = {no: {(int(t), int(e)): (c, i) for c, s in enumerate(so) for i, (t, e) in enumerate(s)}
                         for no, so in fo.items()}
    by_r, by_o = memo["tokens"]
    pairings, judged = [], None
    tok = lambda ids, e: (by_r if ids is ref_ids else by_o).get(e, set())
    for nr, sr in fr.items():
        mine = sr[call]
        for no, so in fo.items():
            if (mine[:, 0] < 0).any() or any((x[:, 0] < 0).any() for x in so):
                groups = []  # the tokens inside a group are not known: paired by content (module docstring)
                for e in sorted({int(x) for x in mine[:, 1]}):
                    both = (tok(ref_ids, e) & tok(other_ids, e)) - aside
                    rr = np.flatnonzero(mine[:, 1] == e)
                    oo = np.asarray([(c, i) for c, x in enumerate(so) for i in np.flatnonzero(x[:, 1] == e)],
                                    np.int64).reshape(-1, 2)
                    groups.append((e, rr, oo, len(both), sorted(both)))
                pairings.append((f"{nr}/{no}", "content", groups, None))
                judged = sum(g[3] for g in groups)
                continue
            where = memo["where"][no]
            keep = [i for i, (t, e) in enumerate(mine) if (int(t), int(e)) in where and int(t) not in aside]
            other = np.asarray([where[(int(mine[i][0]), int(mine[i][1]))] for i in keep], np.int64).reshape(-1, 2)
            pairings.append((f"{nr}/{no}", np.asarray(keep, np.int64), other, mine[keep, 0] if keep else
                             np.zeros(0, np.int64)))
            judged = len(keep)
    any_r = next(iter(fr.values()))
    if "key" not in memo:
        memo["key"] = (sum(len(s) for s in any_r),
                       sum(len(tok(ref_ids, e) - ((tok(other_ids, e)) - aside)) for e in by_r))
    key_rec, key_aside = memo["key"]
    experts = sorted({int(e) for e in any_r[call][:, 1]})
    return Plan(pairings, int(ref_rows[call]), int(ref_rows[call]) - judged, key_rec, key_aside,
                f"expert {experts[0]}" if len(experts) == 1 else f"{len(experts)} experts")


def _by_content(ra_all: np.ndarray, row, groups):
    """Rows of expert groups whose token order is unknown, paired by content: in each group the
    nearest pairs first (greedy), the ``judged`` closest kept (the group's rows of tokens set aside or
    routed on one side only are the ones left). ``(ref [m, ...], other [m, ...], tokens per row)``:
    a row's tokens are the group's candidates (its reach is the largest of theirs)."""
    ras, cas, toks = [], [], []
    for _e, rr, oo, judged, both in groups:
        if not judged or not len(rr) or not len(oo):
            continue
        a = ra_all[rr].reshape(len(rr), -1).astype(np.float64)
        b = np.stack([row(c, i) for c, i in oo]).reshape(len(oo), -1).astype(np.float64)
        d = np.sqrt(np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0))  # [ra, rb]
        d = np.where(np.isfinite(d), d, np.inf)
        pairs, used_i, used_j = [], set(), set()
        want = min(len(rr), len(oo))
        for flat in np.argsort(d, axis=None, kind="stable"):  # nearest first, each row once
            i, j = divmod(int(flat), d.shape[1])
            if i in used_i or j in used_j:
                continue
            pairs.append((d[i, j], i, j))
            used_i.add(i)
            used_j.add(j)
            if len(pairs) == want:
                break
        for _, i, j in sorted(pairs)[:judged]:
            ras.append(ra_all[rr[i]])
            cas.append(row(*oo[j]))
            toks.append(np.asarray(both, np.int64))
    if not ras:
        return ra_all[:0], ra_all[:0], []
    return np.stack(ras), np.stack(cas), toks


class ExpertRows:
    """The walk's part for per-expert calls: a dispatch-order key's rows paired by slot and judged."""

    def __init__(self, state: WalkState, judge: Judge):
        self.s, self.judge = state, judge
        self._calls_cache: dict = {}  # label -> {(key, step): [Entry per call]}
        self._plan_memo: dict = {}  # label -> ((key, step, aside), memo): the last key only

    def _calls(self, label: str, key: str, step: int) -> list:
        if label not in self._calls_cache:
            by: dict = {}
            for (k, s, c), e in self.s.ents[label].items():
                by.setdefault((k, s), {})[c] = e
            self._calls_cache[label] = {ks: [d[c] for c in sorted(d)] for ks, d in by.items()}
        return self._calls_cache[label].get((key, step), [])

    def _layer_ids(self, side, step: int, layer):
        ids = side.ids.get((step, layer))
        if ids is not None:
            return ids
        e = side.same_ids.get((step, layer))
        if e is None:
            return None
        try:
            a = token_major(load(self.s.dumps["reference"], e), e)
        except (ProbeError, ValueError):
            return None
        if a is None:
            return None
        side.ids[(step, layer)] = (a, a)  # equal on both sides: realigning by them is a no-op
        return side.ids[(step, layer)]

    def plan(self, p, side, label: str) -> Plan | None:
        """The pairing of ``p``'s reference call with ``label``'s rows (None: not per-expert calls)."""
        if is_integer(p.ref.dtype) or len(p.ref.global_shape()) < 2 or self.s.is_decision(p.key, p.ref):
            return None
        layer = layer_of(p.key)
        ids = self._layer_ids(side, p.step, layer)
        if ids is None:
            return None
        ref_calls, other_calls = self._calls("reference", p.key, p.step), self._calls(label, p.key, p.step)
        if not other_calls:
            return None
        rows = lambda es: [e.global_shape()[0] if e.global_shape() else None for e in es]
        n = ids[0].shape[0]
        aside = set(side.reach.aside(p.step, layer, n))
        mk = (p.key, p.step, tuple(sorted(aside)))
        if label not in self._plan_memo or self._plan_memo[label][0] != mk:
            self._plan_memo[label] = (mk, {})
        memo = self._plan_memo[label][1]
        return plan(ids[0], ids[1], rows(ref_calls), rows(other_calls), p.call, aside, memo)

    def measure(self, p, pl: Plan, label: str, rtol: float):
        """Measured over the rows whose slots both sides hold, paired by slot under the fitting
        layouts that pair them closest; (Measured, an other-side entry) or (None, None) when no row
        pairs."""
        if not pl.pairings or pl.recorded == pl.aside:
            return None, None
        calls = self._calls(label, p.key, p.step)
        arrays: dict = {}
        try:
            r = load(self.s.dumps["reference"], p.ref)
            for _, kind, other, _ in pl.pairings:
                cs = [g[2] for g in other] if isinstance(kind, str) else [other]
                for c in {int(x) for o in cs for x in o[:, 0]}:
                    if c not in arrays:
                        arrays[c] = load(self.s.dumps[label], calls[c])
        except ProbeError as e:
            return Measured("unreadable", note=str(e).splitlines()[0]), calls[0]
        ra_all = np.asarray(r.array)
        if not arrays or any(np.asarray(v.array).shape[1:] != ra_all.shape[1:] for v in arrays.values()):
            return Measured("shape", note=f"{pl.expert}: row shapes differ"), calls[0]
        row = lambda c, i: np.asarray(arrays[int(c)].array)[int(i)]
        best = None
        for name, kind, other, tokens in pl.pairings:
            if isinstance(kind, str):  # content: per expert group (module docstring)
                ra, ca, tokens = _by_content(ra_all, row, other)
            else:
                ra = ra_all[kind]
                ca = np.stack([row(c, i) for c, i in other]) if len(other) else ra[:0]
                tokens = [np.asarray([t]) for t in tokens]
            if not len(ra):
                continue
            d = float(np.nansum((ra.astype(np.float64) - ca.astype(np.float64)) ** 2))
            if best is None or d < best[0]:
                best = (d, name, ra, ca, tokens, next(iter(arrays)))
        if best is None:
            return None, None
        d_best, name, ra, ca, tokens, first = best
        if len(ra) >= 2:  # evidence that the rows follow the decision: closer than rows of other slots
            null = float(np.nansum((ra.astype(np.float64) - np.roll(ca, 1, axis=0).astype(np.float64)) ** 2))
            if d_best > NULL_RATIO ** 2 * null:
                return Measured("unfit", note=f"{pl.expert}: rows paired through the decision are no closer than "
                                              f"rows of other slots (rms {np.sqrt(d_best / max(null, 1e-300)):.2f}x): "
                                              "their order does not follow the decision"), calls[first]
        dtype_c = arrays[first].dtype
        out = Measured("ok", token_dim=0, token_rows=len(ra), tokens=tokens,
                       note=f"{pl.expert}: rows paired by (token, expert) through the decision (layouts {name})")
        rv, cv = Values(ra, r.dtype), Values(ca.astype(ra.dtype, copy=False), dtype_c)
        if np.array_equal(ra, ca):
            out.status = "exact"
        atol = abs_tolerance(p.ref, rtol)
        out.metrics = judged_metrics(rv, cv, 0, None, atol, rtol)
        out.error = out.metrics.error(self.judge.metric)
        if out.metrics.nonfinite_mismatch == 0:
            out.row_errors, out.row_scale = row_errors_and_scale(rv, cv, 0)
        return out, calls[first]

    def row(self, p, pl: Plan, precision, depth, layer) -> Row:
        """One call of a dispatch-order key, judged over the slots both sides hold (by slot)."""
        m, other = self.measure(p, pl, "candidate", floor.base_threshold(precision))
        cand_key = other.key if other is not None else ""
        row = Row(p.key, p.step, p.call, p.ref.key, cand_key, p.ref.global_shape(), p.ref.dtype,
                  other.dtype if other is not None else p.ref.dtype, layer=layer, depth=depth)
        share = (pl.key_aside, pl.key_recorded)
        if m is not None and m.status == "unfit":
            coverage.cover(row, pl.recorded, None, whole="not comparable")
            return self.s.skip(row, m.note + ": not compared by index")
        if m is not None and m.status in ("unreadable", "shape"):
            self.judge.status(row, m)
            coverage.cover(row, pl.recorded, None, whole="unreadable" if m.status == "unreadable" else "")
            return row
        if m is None or not m.token_rows:
            row.status, row.score = "ok", 0.0
            row.note = (f"{pl.expert}: all {pl.recorded} row(s) set aside (slots the candidate does not hold, "
                        "or a changed decision's own tokens)")
            coverage.cover(row, pl.recorded, pl.recorded, pl.recorded, share=share)
            return row
        ctl = None
        if "control" in self.s.ents:
            cp = self.plan(p, self.s.ctl, "control")
            if cp is not None:
                ctl, _ = self.measure(p, cp, "control", floor.base_threshold(precision))
                ctl = ctl if ctl is not None and ctl.status in ("ok", "exact") else None
        width = int(np.prod(p.ref.global_shape()[1:]))
        reach, own = self._reach(p, m, layer, width)
        aside = (f"{pl.aside} of {pl.recorded} row(s) set aside (tokens routed differently, or a changed "
                 "decision's own)") if pl.aside else ""
        self.judge.value(row, m, ctl, precision=precision, integer=False, width=width, reach=reach, own=own,
                         aside_note=aside)
        coverage.cover(row, pl.recorded, pl.recorded, pl.aside, share=share)
        return row

    def _reach(self, p, m: Measured, layer, width: int):
        """(reach, own) per judged row (each row's tokens' largest), or (None, None) where none reaches."""
        if m.row_errors is None or not len(m.row_errors):
            return None, None
        n = self._layer_ids(self.s.cand, p.step, layer)[0].shape[0]
        scale = float(p.ref.first.get("rms") or 0.0) * float(np.sqrt(max(width, 1)))
        per_token = self.s.cand.reach.allowance(p.key, p.call, p.step, layer, n, width, scale)
        if per_token is None:
            return None, None
        pick = lambda a: np.asarray([float(a[t].max()) if len(t) else 0.0 for t in m.tokens])
        reach = pick(per_token)
        return (reach, pick(self.s.cand.reach.own)) if reach.any() else (None, None)

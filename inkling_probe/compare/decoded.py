"""The walk's part for the token each step decodes (rules in compare/steps.py): a different decoded
token makes the next step's rows of that token its own, set aside there, when that step was fed it.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare import steps
from inkling_probe.compare.align import Entry, Pair, layer_of
from inkling_probe.compare.measure import load, token_rows
from inkling_probe.compare.report import Row, join_notes
from inkling_probe.compare.values import as_float64, is_integer
from inkling_probe.compare.walk_state import WalkState
from inkling_probe.errors import ProbeError


class DecodedTokens:
    """Reads the logits rows of each step and notes the tokens decoded differently."""

    def __init__(self, state: WalkState):
        self.s = state
        self._by_step: dict | None = None  # step -> [(mapped key, Entry)] of the reference, by seq

    def note(self, row: Row, p: Pair) -> None:
        """A different decoded token: the next step's rows are its own (set aside there)."""
        nxt = self._next_step(p)
        if nxt is None:
            return
        step_next, n_next = nxt
        for label, side, other in (("candidate", self.s.cand, p.cand), ("control", self.s.ctl, self.s.ctl_entry(p))):
            if other is None:
                continue
            try:
                r, c = as_float64(load(self.s.dumps["reference"], p.ref)), as_float64(load(self.s.dumps[label], other))
            except (ProbeError, ValueError):
                continue
            if r.ndim < 2 or r.shape != c.shape:
                continue
            d = steps.decoded_change(r.reshape(-1, r.shape[-1]), c.reshape(-1, c.shape[-1]), n_next)
            if d is None or not d.changed or not self._fed(step_next, label, other, d.changed):
                continue
            side.note_changes(step_next, n_next, d.changed, None, "token")
            if label == "candidate":
                row.decodes = (step_next, n_next, sorted(int(t) for t in d.changed))  # divergence.attribute
                kinds = f"{len(d.near_tie)} near-tie, {len(d.clear)} clear-margin" if not d.unclassified else "unclassified"
                margins = ", ".join(f"gap {g:.3g} vs move {m:.3g}" for g, m in list(d.margins.values())[:3])
                row.note = join_notes(row.note, f"decoded token differs for {len(d.changed)} of {n_next} next-step "
                                                f"row(s) ({kinds}{'; ' + margins if margins else ''}): step "
                                                f"{step_next}'s rows are set aside (teacher-forced decode keeps "
                                                "them judged: `inkling-probe run --force-tokens REF_DUMP`, or "
                                                "inkling_probe.compare.force_tokens for transformers)")

    def _fed(self, step: int, label: str, like: Entry, rows) -> bool:
        """Whether the next step was fed the decoded tokens: one of its first recorded keys, before
        its first layered key (the ids, the embedding), differs on those rows by another token: any
        id on an integer key, a whole row (relative) on a float one, not rounding. Teacher-forced
        decode steps feed fixed tokens, whatever the logits say. (The first key alone missed
        transformers' ``in.input_ids``: ids 40 and 41 are 2.5 % apart, under a whole row.)"""
        heads = self._heads(step)
        if not heads:
            return True
        read = False
        for mapped, first in heads:
            other = self.s.ents[label].get((mapped, step, first.call))
            if other is None:
                continue
            try:
                r, c = as_float64(load(self.s.dumps["reference"], first)), as_float64(load(self.s.dumps[label], other))
            except (ProbeError, ValueError):
                continue
            n = token_rows(first)
            if r.size != c.size or not n or r.size % n:
                continue
            read = True
            r, c = r.reshape(n, -1), c.reshape(n, -1)
            picked = [t for t in rows if t < n]
            if is_integer(first.dtype):
                if np.any(r[picked] != c[picked]):
                    return True
                continue
            err = np.linalg.norm(c[picked] - r[picked], axis=1) / np.maximum(np.linalg.norm(r[picked], axis=1), 1e-30)
            if np.any(err > steps.OTHER_TOKEN):
                return True
        return not read

    def _heads(self, step: int, most: int = 4) -> list[tuple[str, Entry]]:
        """The reference's first ``(mapped key, entry)`` of ``step`` (by seq) before its first layered
        key, at most ``most`` (at least the first one)."""
        if self._by_step is None:
            self._by_step = {}
            for (k, s, c), e in self.s.ents["reference"].items():
                self._by_step.setdefault(s, []).append((k, e))
            for v in self._by_step.values():
                v.sort(key=lambda ke: ke[1].seq)
        out = []
        for k, e in self._by_step.get(step, [])[:most]:
            if out and layer_of(e.key) is not None:
                break
            out.append((k, e))
        return out

    def _next_step(self, p: Pair) -> tuple[int, int] | None:
        later = sorted({s for (k, s, c) in self.s.ents["reference"] if k == p.key and s > p.step})
        if not later:
            return None
        e = self.s.ents["reference"].get((p.key, later[0], p.call))
        n = token_rows(e) if e is not None else None
        return (later[0], n) if n else None

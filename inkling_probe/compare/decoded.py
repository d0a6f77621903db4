"""The walk's part for the token each step decodes (rules in compare/steps.py): a different decoded
token makes the next step's rows of that token its own, set aside there, when that step was fed it.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare import steps
from inkling_probe.compare.align import Entry, Pair
from inkling_probe.compare.measure import load, token_rows
from inkling_probe.compare.report import Row, join_notes
from inkling_probe.compare.values import as_float64
from inkling_probe.compare.walk_state import WalkState
from inkling_probe.errors import ProbeError


class DecodedTokens:
    """Reads the logits rows of each step and notes the tokens decoded differently."""

    def __init__(self, state: WalkState):
        self.s = state

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
                kinds = f"{len(d.near_tie)} near-tie, {len(d.clear)} clear-margin" if not d.unclassified else "unclassified"
                margins = ", ".join(f"gap {g:.3g} vs move {m:.3g}" for g, m in list(d.margins.values())[:3])
                row.note = join_notes(row.note, f"decoded token differs for {len(d.changed)} of {n_next} next-step "
                                                f"row(s) ({kinds}{'; ' + margins if margins else ''}): step "
                                                f"{step_next}'s rows are set aside (teacher-forced decode keeps "
                                                "them judged: `inkling-probe run --force-tokens REF_DUMP`, or "
                                                "inkling_probe.compare.force_tokens for transformers)")

    def _fed(self, step: int, label: str, like: Entry, rows) -> bool:
        """Whether the next step was fed the decoded tokens: its first recorded key (the embedding)
        differs on those rows by a whole row (another token), not by rounding. Teacher-forced
        decode steps feed fixed tokens, whatever the logits say."""
        first = min((e for (k, s, c), e in self.s.ents["reference"].items() if s == step), key=lambda e: e.seq,
                    default=None)
        if first is None:
            return True
        other = self.s.ents[label].get((self._mapped(first), step, first.call))
        if other is None:
            return True
        try:
            r, c = as_float64(load(self.s.dumps["reference"], first)), as_float64(load(self.s.dumps[label], other))
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
        return next(k for (k, s, c), x in self.s.ents["reference"].items() if x is e)

    def _next_step(self, p: Pair) -> tuple[int, int] | None:
        later = sorted({s for (k, s, c) in self.s.ents["reference"] if k == p.key and s > p.step})
        if not later:
            return None
        e = self.s.ents["reference"].get((p.key, later[0], p.call))
        n = token_rows(e) if e is not None else None
        return (later[0], n) if n else None

"""The running state of one compared dump (candidate or control) along execution order: the precision
so far, the layers seen, the changed decisions and the token rows set aside after them. The walker
keeps one per side; compare/parallel.py replays :meth:`Side.advance` to guess the tolerances it
measures ahead with.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from inkling_probe.compare import floor
from inkling_probe.compare.align import layer_of
from inkling_probe.compare.reach import Reach


@dataclass
class Side:
    """Running state of one compared dump (candidate or control) along execution order."""

    precision: str | None = None
    layers_seen: dict = field(default_factory=dict)  # step -> set of layers
    aside: dict = field(default_factory=dict)  # step -> (token rows, set of changed rows)
    reach: Reach = field(default_factory=Reach)  # the changed decisions and what they reach
    tally: dict = field(default_factory=dict)  # decision key -> [changed, seen] over steps
    flips: dict = field(default_factory=dict)  # (key, step, call) -> Decision
    routed: dict = field(default_factory=dict)  # (step, layer) -> (tokens, k) of a decision seen there
    ids: dict = field(default_factory=dict)  # (step, layer) -> (reference ids, candidate ids) [T, k]
    decided: dict = field(default_factory=dict)  # (step, layer) -> (ref ids, other ids, Decision, scored)
    same_ids: dict = field(default_factory=dict)  # (step, layer) -> reference Entry of a decision equal on both sides

    def advance(self, key: str, step: int, dtypes) -> tuple[int | None, int, str | None]:
        """(layer, depth, precision) of the next key."""
        layer = layer_of(key)
        seen = self.layers_seen.setdefault(step, set())
        if layer is not None:
            seen.add(layer)
        running = [d for d in dtypes if floor.precision_rank(d) and floor.precision_rank(d) < 0.1]
        self.precision = floor.coarsest(self.precision, *running)
        return layer, len(seen), floor.coarsest(self.precision, *dtypes)

    def set_aside(self, step: int, layer=None, offset: int = 0):
        """``n -> rows``: the changed tokens' own rows (set aside after their decision, in its step);
        ``offset``: the token of the key's first row (compare/tail_rows.py)."""
        return lambda n: self.reach.aside(step, layer, n, offset) or None

    def changed_in(self, step: int) -> tuple[int | None, set]:
        return self.aside.get(step, (None, set()))

    def note_changes(self, step: int, n_rows: int, rows, layer=None, kind: str = "routing") -> None:
        """The changed tokens of a decision: set aside after it, reaching later rows (reach.py)."""
        if not rows:
            return
        old_n, old = self.aside.get(step, (n_rows, set()))
        if old_n == n_rows:
            self.aside[step] = (n_rows, old | set(rows))
        self.reach.add(step, layer, n_rows, rows, kind)

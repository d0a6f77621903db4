"""What the walk's parts share: the dumps and their entries, each compared side's running state
(:class:`~inkling_probe.compare.side.Side`), which keys are decisions, and the keys set aside as not
comparable. The walker (compare/walker.py) owns one; its parts (routing decisions, expert slots,
decoded tokens) are objects that read and update it, no mixins.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from inkling_probe.compare.align import Entry, Pair
from inkling_probe.compare.report import Row
from inkling_probe.compare.reach import Reach
from inkling_probe.compare.side import Side
from inkling_probe.compare.values import is_integer
from inkling_probe.settings import matches_any

# Integer keys that are routing decisions by name: transformers' MoE routers return (logits,
# weights, ids) and pass the ids to their experts. Only integer tensors matching these count.
DEFAULT_DECISIONS = ("*.mlp.gate.2", "*.block_sparse_moe.gate.2", "*.mlp.experts.in.1",
                     "*.block_sparse_moe.experts.in.1")


@dataclass
class WalkState:
    """One comparison's dumps (label -> Dump), entries (label -> {(key, step, call): Entry}) and sides."""

    dumps: dict
    ents: dict
    batch_rows: tuple  # (reference row, candidate row) of a batch, or None each
    decision_globs: list
    mixing_globs: list = field(default_factory=list)  # keys of ops that mix token rows (reach.MIXING and these)
    cand: Side = field(default_factory=Side)
    ctl: Side = field(default_factory=Side)
    not_comparable: list = field(default_factory=list)  # keys skipped as not comparable

    def __post_init__(self) -> None:
        if self.mixing_globs:
            self.cand.reach, self.ctl.reach = Reach(self.mixing_globs), Reach(self.mixing_globs)

    def is_decision(self, key: str, *es: Entry) -> bool:
        """A declared decision (meta kind), a key matching the user's decision globs, or an integer
        key of :data:`DEFAULT_DECISIONS` on every side."""
        if any((e.first.get("meta") or {}).get("kind") == "decision" for e in es):
            return True
        if self.decision_globs and matches_any(key, self.decision_globs):
            return True
        return bool(es) and all(is_integer(e.dtype) for e in es) and matches_any(key, DEFAULT_DECISIONS)

    def ctl_entry(self, p: Pair) -> Entry | None:
        """The control's entry of the pair's (key, step, call), or None."""
        return self.ents.get("control", {}).get((p.key, p.step, p.call))

    def skip(self, row: Row, why: str) -> Row:
        """The row set aside as not comparable, with the reason."""
        row.status, row.score, row.note = "not_comparable", 0.0, why
        self.not_comparable.append(row.key)
        return row

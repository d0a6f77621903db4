"""Where a step's large tensors go: pack parts allocated ahead ("arenas"), sized from the step before.

A tensor of at least the pack threshold gets a dataset of its own, and creating an HDF5 dataset
costs the recording thread ~0.1 ms in a model's forward (its caches cold): 15 of the ~50 ms that
record() paid beyond hashing and writing a CPU forward of transformers' Inkling small (150 large
tensors). Steps repeat (the same modules record the same shapes in the same order), so from the
second step on the writer allocates one dataset for several consecutive large tensors of a stored
type, sized to hold exactly the ones the step before had at those places, up to
:data:`ARENA_BYTES`, and writes each tensor into it at its offset as soon as it arrives (a pack
row: ``dataset`` and ``offset``). A step that differs from the one before (other shapes, more
tensors) falls back to datasets of their own from where it differs; an arena it leaves part-filled
keeps an unwritten tail (zeros to a plain reader, no row points there).
"""
from __future__ import annotations

ARENA_BYTES = 8 << 20  # the most one arena holds: a reader loads a pack whole (store/dump.py)


class ArenaPlan:
    """The byte sizes of the large tensors each stored type received in the last step, in order,
    and how many of the current step's it has seen."""

    def __init__(self):
        self._step = None
        self._last: dict[str, list[int]] = {}  # stored type -> the last step's large tensors' bytes
        self._now: dict[str, list[int]] = {}  # the same for the current step, so far

    def _at(self, step: int) -> None:
        if step != self._step:
            if self._step is not None:
                self._last = self._now
            self._step, self._now = step, {}

    def capacity(self, step: int, kind: str, nbytes: int) -> int:
        """Bytes for an arena that starts with a tensor of ``nbytes`` of stored type ``kind`` in
        ``step``: those of the last step's tensors from this place on that fit in ARENA_BYTES, when
        the last step had a tensor of this size here and at least one more fits; else 0 (a dataset
        of its own)."""
        self._at(step)
        sizes = self._last.get(kind)
        i = len(self._now.get(kind, ()))
        if not sizes or i >= len(sizes) or sizes[i] != nbytes:
            return 0
        total, j = 0, i
        while j < len(sizes) and total + sizes[j] <= ARENA_BYTES:
            total += sizes[j]
            j += 1
        return total if j > i + 1 else 0

    def seen(self, step: int, kind: str, nbytes: int) -> None:
        """A large tensor of ``kind`` and ``nbytes`` was placed in ``step`` (after :meth:`capacity`)."""
        self._at(step)
        self._now.setdefault(kind, []).append(nbytes)

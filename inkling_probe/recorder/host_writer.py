"""Host tensors into the store's writer: the one object the recorder writes through and hands to its
drain (drain.py's ``Writer``). A tensor is encoded as stored; a sealed batch's row statistics are
added up per tensor here, or by a writer process that takes them; every call into the writer holds
the lock the recording thread and the drain thread share."""
from __future__ import annotations

import torch

from inkling_probe.store.dtypes import bf16_bits, encode


class HostWriter:
    """Hands host tensors to the writer it is attached to (a SegmentWriter, or a ProcessWriter's
    handle), with the statistics and storing that ``mode`` asks for (settings.py: full, stats, hash).

    Attached when the recording opens its writer; detached when recording stops (failed, closed, a
    forked child): a hand-over after that fails, and a slot to free is left alone."""

    def __init__(self, lock, mode: str):
        self.writer = None
        self._lock = lock  # the recorder's writer lock
        self._stats, self._store = mode != "hash", mode == "full"

    def attach(self, writer) -> None:
        self.writer = writer

    def detach(self) -> None:
        self.writer = None

    def write(self, row: dict, host, done, stats) -> None:
        """Encode a host tensor and hand it to the writer (recording thread or drain thread).

        ``done()`` is called once the writer no longer needs ``host`` (None: ``host`` is the model's
        own tensor, so the writer copies it if it would keep it). ``stats``: the statistics when
        computed already (on the GPU), else None.
        """
        array, row["storage"] = encode(host, row["dtype"])
        if done is None and row["storage"] != "native":
            done = _nothing  # encoding made a new array: nobody else holds it
        if stats is None:
            stats = self._stats
        with self._lock:
            self.writer.add(row, array, stats=stats, store=self._store, on_stored=done)

    def write_batch(self, rows: list, host, spans: list, row_stats, done) -> None:
        """Hand a sealed batch (step_batch.py) to the writer in one call (the drain): ``host`` is its
        float32 or bf16 host buffer, ``spans`` (offset, numel, shape) where each tensor sits in it,
        ``row_stats`` the buffer's row statistics (numpy [4, m], or None); ``done()`` once the writer
        no longer needs ``host``. The writer process adds the row statistics up per tensor itself."""
        used = spans[-1][0] + spans[-1][1] if spans else 0
        flat = bf16_bits(host[:used]) if host.dtype is torch.bfloat16 else host[:used].numpy()
        for row in rows:
            row["storage"] = "native"  # float32 or bf16, each as itself
        sums, extra = None, {}
        if row_stats is not None:
            from inkling_probe.recorder import step_batch
            from inkling_probe.store.batch import sums_from_rows
            if getattr(self.writer, "takes_row_stats", False):  # the writer process adds them up
                extra = {"row_stats": row_stats, "row_values": step_batch.ROW}
            else:
                sums = sums_from_rows(row_stats, spans, step_batch.ROW)
        with self._lock:
            self.writer.add_batch(rows, flat, spans, sums, stats=self._stats, store=self._store,
                                  on_stored=done, **extra)

    def free_slot(self, view) -> None:
        """A ring slot taken but never queued (drain thread): the writer frees its space."""
        with self._lock:
            if self.writer is not None:
                self.writer.free_slot(view)


def _nothing() -> None:
    pass

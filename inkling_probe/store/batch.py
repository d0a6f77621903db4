"""A batch: several tensors of one stored dtype laid end to end in one flat array.

The recorder gathers a stretch of float32/bf16 CUDA tensors into one device buffer and brings it to
the host in one copy (recorder/step_batch.py); the writer gets the whole batch in one call
(``add_batch``), so the recording process pays one hand-over per batch, not one per tensor. Here:
splitting a batch back into its tensors, and the countdown that frees the batch's buffer once the
writer has stored the last of them.

numpy only: this runs in the writer process too.
"""
from __future__ import annotations

import threading

import numpy as np

from inkling_probe.store.stats import summary_from_sums


class Countdown:
    """Calls ``action`` (None: nothing) once ``n`` calls of :meth:`one` have come (from any
    threads); at once if ``n`` is 0."""

    def __init__(self, n: int, action=None):
        self._left, self._action, self._lock = n, action or _nothing, threading.Lock()
        if n == 0:
            self._action()

    def one(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._action()


def split(rows: list, flat: np.ndarray, spans: list, sums: np.ndarray | None, stats: bool):
    """(row, tensor view, stats) for each tensor of a batch, in order.

    ``spans``: (offset, numel, shape) of each tensor in ``flat``; ``sums``: [k, 5] float64 sums per
    tensor (:func:`sums_from_rows`), turned into the statistics the writer takes as given; without
    them, or where a tensor's sum is NaN (it holds a NaN or an infinity), ``stats`` says whether the
    writer computes statistics itself.
    """
    for i, (row, (offset, numel, shape)) in enumerate(zip(rows, spans)):
        given = stats if sums is None or np.isnan(sums[i, 0]) else summary_from_sums(numel, *sums[i])
        yield row, flat[offset: offset + numel].reshape(shape), given


def sums_from_rows(rows: np.ndarray, spans: list, row: int) -> np.ndarray:
    """[k, 5] float64 per tensor of a batch, from its buffer's row statistics (numpy [4, m]: each
    row's sum, 2-norm, min and max, step_batch.row_stats): the sum, sum of squares and absmax, and 0
    non-finite values and 0 NaNs; ``spans`` (offset, numel, shape) place each tensor at the start of
    a row of ``row`` values, its rows running to the next tensor's.

    A tensor with a NaN or an infinity gets a NaN sum: the writer computes its statistics from the
    values (counts, and sums over the finite values alone), as it does without device statistics.
    """
    starts = np.fromiter((offset // row for offset, _, _ in spans), dtype=np.int64, count=len(spans))
    total = np.add.reduceat(rows[0], starts)
    squares = np.add.reduceat(np.square(rows[1]), starts)
    absmax = np.maximum(np.maximum.reduceat(rows[3], starts), -np.minimum.reduceat(rows[2], starts))
    sums = np.zeros((len(spans), 5))
    sums[:, 0], sums[:, 1], sums[:, 2] = total, squares, absmax
    sums[~np.isfinite(squares), 0] = np.nan
    return sums


def add_each(add, rows: list, flat: np.ndarray, spans: list, sums, stats: bool, store: bool, on_stored) -> None:
    """Hand a batch's tensors one by one to ``add(row, array, stats=, store=, on_stored=)``;
    ``on_stored()`` once every tensor's bytes are stored, also when an add fails part-way."""
    left = Countdown(len(rows), on_stored)
    handed = 0
    try:
        for row, array, given in split(rows, flat, spans, sums, stats):
            handed += 1
            done = once(left.one)  # a failing add may or may not have called it
            try:
                add(row, array, stats=given, store=store, on_stored=done)
            except BaseException:
                done()
                raise
    finally:
        for _ in range(len(rows) - handed):
            left.one()  # tensors never handed over


def once(action):
    """``action`` wrapped to run at most once, from whichever thread calls first."""
    lock, ran = threading.Lock(), [False]

    def run():
        with lock:
            if ran[0]:
                return
            ran[0] = True
        action()
    return run


def _nothing() -> None:
    pass

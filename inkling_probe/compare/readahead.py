"""The read-ahead running in this process, as :func:`measure.measure` sees it: a result measured ahead
in a worker, looked up by what makes two measurements the same computation. compare/parallel.py
starts the workers and installs its :class:`~inkling_probe.compare.parallel.ReadAhead` here while a
compare runs; measure.py only looks up, so it needs nothing of parallel.py (which imports measure.py
for its workers' jobs).
"""
from __future__ import annotations

import contextlib

from inkling_probe.compare.align import Entry

_ACTIVE = None  # the read-ahead of the compare running in this process (a parallel.ReadAhead), or None


def key_of(ref_dump, ref: Entry, cand_dump, cand: Entry, metric: str, rtol: float, batch_rows) -> tuple:
    """What makes two measurements the same computation."""
    return (ref_dump.path, ref.key, ref.step, ref.call, cand_dump.path, cand.key, cand.step, cand.call,
            metric, float(rtol), tuple(batch_rows))


def lookup(ref_dump, ref: Entry, cand_dump, cand: Entry, metric: str, rtol: float, batch_rows):
    """The read-ahead's result for this measurement, or None (no read-ahead, or not planned)."""
    if _ACTIVE is None:
        return None
    return _ACTIVE.take(key_of(ref_dump, ref, cand_dump, cand, metric, rtol, batch_rows))


def active():
    """The read-ahead installed now, or None."""
    return _ACTIVE


@contextlib.contextmanager
def installed(reader):
    """``reader`` (with ``take(key)``) answers :func:`lookup` while the body runs."""
    global _ACTIVE
    _ACTIVE = reader
    try:
        yield reader
    finally:
        _ACTIVE = None

"""Read-ahead in a thread for compare with one job: the next pairs' arrays are read while the
current pair is measured, so reading and computing overlap. Off by default
(``parallel.THREAD_READ_AHEAD``, where the measurement is): it pays only where a core is idle.

The store reads plain contiguous datasets with ``preadv`` outside the GIL (store/raw.py) and numpy
releases it in its loops, so the two threads run at once. Only reading moves to the thread: what is
measured, and in which order, is the walker's as before; an array the walker asks for that is not
the next planned one (a skipped pair, a decoded-token check) is read by the walker itself. Memory:
at most ``limit`` bytes (two of the largest arrays planned) are held ahead of the pair being measured.

    with prefetching(items):            # [(dump, entry)] in the order the walker will load them
        ... measure.load(dump, entry) takes the array from here when it is the next one ...
"""
from __future__ import annotations

import contextlib
import threading

_ACTIVE: "Prefetch | None" = None
WINDOW = 64  # how far past the last taken item a take may look (pairs the walker skipped)


def ident(dump, e) -> tuple:
    return (id(dump), e.key, e.step, e.call)


class Prefetch:
    """Reads ``items`` (``(dump, entry)``) in order in one thread, ``limit`` bytes ahead at most."""

    def __init__(self, items: list, limit: int):
        self.items = items
        self.sizes = [_nbytes(e) for _, e in items]
        self.where: dict[tuple, list[int]] = {}  # ident -> its item indices, rising
        for i, (dump, e) in enumerate(items):
            self.where.setdefault(ident(dump, e), []).append(i)
        self.limit = limit
        self.cond = threading.Condition()
        self.ready: dict[int, object] = {}  # item index -> array, or None when reading failed
        self.held = 0
        self.pos = 0  # first item the walker may still take (the reader skips those before it)
        self.stop = False
        self.thread = threading.Thread(target=self._run, name="compare-prefetch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for i, (dump, e) in enumerate(self.items):
            with self.cond:
                while not self.stop and i >= self.pos and self.held and self.held + self.sizes[i] > self.limit:
                    self.cond.wait()
                if self.stop:
                    return
                if i < self.pos:  # walked past already
                    continue
            try:
                array = dump.array(e.key, step=e.step, call=e.call)
            except Exception:  # the walker reads it again itself and meets the error there
                array = None
            with self.cond:
                if i >= self.pos and not self.stop:
                    self.ready[i] = array
                    self.held += self.sizes[i] if array is not None else 0
                self.cond.notify_all()

    def take(self, dump, e):
        """The array of ``(dump, e)`` when it is among the next items (waiting for it), else None."""
        want = ident(dump, e)
        with self.cond:
            i = next((j for j in self.where.get(want, ()) if j >= self.pos), None)
            if i is None or i >= self.pos + WINDOW:
                return None
            for j in [j for j in self.ready if j < i]:  # skipped: never asked for
                self._drop(j)
            self.pos = i  # the reader skips what lies before
            self.cond.notify_all()
            while i not in self.ready and not self.stop:
                self.cond.wait()
            array = self.ready.get(i)
            self._drop(i)
            self.pos = i + 1
            self.cond.notify_all()
            return array

    def _drop(self, j: int) -> None:
        array = self.ready.pop(j, None)
        if array is not None:
            self.held -= self.sizes[j]

    def close(self) -> None:
        with self.cond:
            self.stop = True
            self.ready.clear()
            self.cond.notify_all()
        self.thread.join()


def _nbytes(e) -> int:
    """The array's bytes in memory, about (the stored types are 4 bytes a value or less, but for
    the 64-bit ones)."""
    size = 8 if e.dtype in ("float64", "int64", "uint64") else 4
    return sum(int(r.get("numel") or 0) * size for r in e.rows) or 1


def idle() -> bool:
    """Nothing is being read ahead (a pair may then be read chunk by chunk, compare/stream.py)."""
    return _ACTIVE is None


def take(dump, e):
    """The prefetched array of ``(dump, e)``, or None (nothing prefetching, or not the next one)."""
    return None if _ACTIVE is None else _ACTIVE.take(dump, e)


@contextlib.contextmanager
def prefetching(items: list):
    """Read ``items`` ahead in a thread while the body runs (nested calls prefetch nothing)."""
    global _ACTIVE
    if _ACTIVE is not None or not items:
        yield None
        return
    p = Prefetch(items, 2 * max(_nbytes(e) for _, e in items))
    _ACTIVE = p
    try:
        yield p
    finally:
        _ACTIVE = None
        p.close()

"""Summarise-and-write jobs: a large tensor's hash, statistics and bytes (``pwrite`` into the space
its dataset was allocated, store/segment_file.py), off the thread that calls HDF5.

Jobs run on a few threads where the machine has cores to spare (:func:`default_workers`); hashing,
numpy reductions and ``pwrite`` release the GIL, so one step's large tensors are summarised in
parallel; their writes into one file take turns (``SERIAL_WRITES``: the kernel serialises them on
the file anyway). A tensor of ``_SPLIT_BYTES`` or more is hashed by one job and written by another.
"""
from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import diskio
from inkling_probe.store.batch import Countdown
from inkling_probe.store.summarise import _failed, _summarise

_MAX_WORKERS = 4
SERIAL_WRITES = True  # job threads take turns at pwrite (see _Jobs); False: each writes at once
_SPLIT_BYTES = 4 << 20  # a tensor this large is hashed and written by two job threads at once (the
# logits, last in a forward, are most of a step's tail: ~1.3 ms of hashing off it per 16 MB)


def default_workers() -> int:
    """Job threads for this process: none on one or two cores (the model needs them), else up to 4."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(_MAX_WORKERS, cores - 2))


class _Jobs:
    """Summarise-and-write jobs for large tensors: on ``workers`` threads, or at once with none.

    The first failure is kept (as a one-line message naming the key) and raised by the next
    :meth:`check` or :meth:`wait`; jobs queued after it are skipped.
    """

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list = []
        self._error: str | None = None
        self._lock = threading.Lock()
        # one file's writes go one at a time (each lane's file its own turn): hashing and statistics
        # run side by side, but writes into one file serialise on its inode lock in the kernel, and waiting there costs CPU (the
        # writer process of an H200 GPU forward: 60-90 ms of CPU with four threads writing at
        # once, 35-48 ms taking turns; scripts/bench_record_parts.py, "parallel writes")
        self._io_locks: dict = {}  # file descriptor -> the lock its writes take turns at
        self.reserve = True  # fallocate before writing (the segment's writer sets it: not on tmpfs)

    def submit(self, row: dict, array: np.ndarray, fd: int, offset: int, stats: bool, folder: str,
               on_stored, reserve: bool = True) -> None:
        """Hash and summarise the tensor and write its bytes at ``offset``; ``reserve``: its blocks
        are not reserved yet (an arena's were, whole: store/arenas.py)."""
        reserve = reserve and self.reserve
        if not self.workers:
            self._run(row, array, fd, offset, stats, folder, on_stored, reserve=reserve)
            self.check()
            return
        if self.workers >= 2 and array.nbytes >= _SPLIT_BYTES:  # hash and write side by side
            left = Countdown(2, on_stored)
            self._queue(self._run, row, array, fd, offset, stats, folder, left.one, write=False)
            self._queue(self._run, row, array, fd, offset, stats, folder, left.one, summarise=False,
                        reserve=reserve)
        else:
            self._queue(self._run, row, array, fd, offset, stats, folder, on_stored, reserve=reserve)

    def submit_part(self, part: list, fd: int, offset: int, folder: str, one_stored) -> None:
        """Hash and summarise a pack part's tensors [(row, array, stats)] and write them back to back
        at ``offset``; ``one_stored()`` once per tensor when done with it (also after a failure)."""
        if not self.workers:
            self._run_part(part, fd, offset, folder, one_stored)
            self.check()
            return
        self._queue(self._run_part, part, fd, offset, folder, one_stored)

    def _queue(self, fn, *args, **kwargs) -> None:
        """Run ``fn`` on a job thread (the pool made at the first job); finished futures are let go."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="inkling-probe-write")
        self._futures.append(self._pool.submit(fn, *args, **kwargs))
        if len(self._futures) > 256:
            self._futures = [f for f in self._futures if not f.done()]

    def _run_part(self, part: list, fd: int, offset: int, folder: str, one_stored) -> None:
        try:
            if self._error is None:
                for row, array, stats in part:
                    _summarise(row, array, stats)
                views = [memoryview(np.ascontiguousarray(a)).cast("B") for _, a, _ in part]
                with self._io(fd):
                    if self.reserve:
                        diskio._reserve_blocks(fd, offset, sum(len(v) for v in views))
                    diskio._pwritev_all(fd, views, offset)
        except Exception as e:
            with self._lock:
                self._error = self._error or _failed(part[0][0], folder, e)  # the part's first tensor
        finally:
            for _ in part:
                one_stored()

    def _run(self, row, array, fd, offset, stats, folder, on_stored, summarise=True, write=True,
             reserve=False) -> None:
        """Hash and summarise the tensor, and write its bytes at ``offset`` (or one of the two);
        ``reserve``: its blocks first."""
        try:
            if self._error is None:
                if summarise and write and array.size:
                    self._summarise_and_write(row, array, stats, fd, offset, reserve)
                elif summarise:
                    _summarise(row, array, stats)
                elif write and array.size:
                    with self._io(fd):
                        if reserve:
                            diskio._reserve_blocks(fd, offset, array.nbytes)
                        diskio._pwrite_all(fd, memoryview(np.ascontiguousarray(array)).cast("B"), offset)
        except Exception as e:
            with self._lock:
                self._error = self._error or _failed(row, folder, e)
        finally:
            if on_stored is not None:
                on_stored()

    def _summarise_and_write(self, row, array, stats, fd: int, offset: int, reserve: bool) -> None:
        """Hash, summarise and write the tensor in one pass over its memory, chunk by chunk (each
        chunk written while it is in the cache); the writes take turns as whole writes do."""
        if reserve:
            with self._io(fd):
                diskio._reserve_blocks(fd, offset, array.nbytes)

        def write(view, at):
            with self._io(fd):
                diskio._pwrite_all(fd, view, offset + at)
        _summarise(row, array, stats, write)

    def _io(self, fd: int):
        """The turn to write into ``fd``'s file (no turns with SERIAL_WRITES off)."""
        if not SERIAL_WRITES:
            return contextlib.nullcontext()
        lock = self._io_locks.get(fd)
        if lock is None:
            with self._lock:
                lock = self._io_locks.setdefault(fd, threading.Lock())
        return lock

    def check(self) -> None:
        if self._error is not None:
            raise DumpError(self._error)

    def wait(self, raise_error: bool = True) -> None:
        """Wait for every submitted job; then raise the first failure (unless told not to)."""
        futures, self._futures = self._futures, []
        for f in futures:
            f.result()  # _run catches everything: this only waits
        if raise_error:
            self.check()

    def shutdown(self) -> None:
        self.wait(raise_error=False)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

"""A shared-memory ring that carries large tensors from the recording process to the writer process.

Sending a large tensor down the pipe costs two copies (into and out of the kernel); through the ring
it costs one copy in the recording process, and the writer reads it in place. The first 8 bytes hold
the writer's ``tail`` (bytes consumed so far, monotonic); the recording process owns ``head``.
Space is reused only after the writer has moved ``tail`` past it.

The ring is a file in /dev/shm (the temp dir where /dev/shm is missing or read-only), unlinked the
moment it is created (the writer inherits its file descriptor), so nothing outlives the processes,
whenever they die. The writer reserves its space (``posix_fallocate``) and says so; until then,
and for good if it can't (a /dev/shm too small, such as Docker's default 64 MiB, or full), large
tensors go through the pipe, with one warning line, instead of a SIGBUS at the first write.
"""
from __future__ import annotations

import collections
import mmap
import os
import struct
import tempfile
import threading
import time

import numpy as np

_TAIL = struct.Struct("<q")
_HEADER = _TAIL.size


class RingFull(RuntimeError):
    """The writer stopped consuming while the recording process waited for ring space."""


SHM_DIR = "/dev/shm"


def ring_file(warn) -> int | None:
    """An unlinked, empty ring file in /dev/shm (or the temp dir), or None; ``warn(text)`` is
    called once when it is not in /dev/shm. The writer process reserves its space (:func:`reserve`):
    the recording process pays no more than creating it."""
    failures = []
    for where in (SHM_DIR, tempfile.gettempdir()):
        try:
            fd, path = tempfile.mkstemp(prefix="inkling-probe-ring-", dir=where)
        except OSError as e:
            failures.append(f"no ring in {where} ({e.strerror or e})")
            continue
        os.unlink(path)
        if where != SHM_DIR:
            warn(f"inkling-probe: {failures[0]}; the writer's ring is in {where} instead")
        return fd
    warn(f"inkling-probe: {failures[0]}; large tensors go through the pipe (slower)")
    return None


def reserve(fd: int, size: int) -> int:
    """Reserve the ring's space (writer side): ``size``, else ``size // 4``; 0 when neither fits
    (ENOSPC, a read-only or full file system). Reserved space can't SIGBUS when written."""
    for n in (size, size // 4):
        try:
            os.posix_fallocate(fd, 0, _HEADER + n)
            return n
        except OSError as e:
            reason = e.strerror or str(e)
    raise OSError(f"no {size >> 20} MiB ring ({reason})")


class RingWriter:
    """Recording-process side: copy payloads in, wait for space when the writer lags."""

    def __init__(self, fd: int, size: int):
        self.fd = fd  # kept open until the writer has inherited it
        self._mm = mmap.mmap(fd, _HEADER + size)
        self.size = size
        self.head = 0
        self._data = np.frombuffer(self._mm, dtype=np.uint8, offset=_HEADER)

    def put(self, payload: np.ndarray, wait) -> tuple[int, int]:
        """Copy ``payload`` (bytes view) in; returns (offset, end) for the writer. ``wait()`` is
        called while there is no space (it must flush pending messages and check the writer)."""
        n = payload.nbytes
        pos = self.head % self.size
        if pos + n > self.size:  # never split a payload: skip to the start of the ring
            self.head += self.size - pos
            pos = 0
        while self.head + n - self.tail() > self.size:
            wait()
        self._data[pos: pos + n] = payload.reshape(-1).view(np.uint8)
        self.head += n
        return pos, self.head

    def tail(self) -> int:
        return _TAIL.unpack_from(self._mm, 0)[0]

    def close(self) -> None:
        self._data = None
        self._mm.close()
        self.close_fd()

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class RingReader:
    """Writer-process side: reserve and map the inherited ring file, read payloads in place."""

    def __init__(self, fd: int, size: int):
        try:
            self.size = reserve(fd, size)
            self._mm = mmap.mmap(fd, _HEADER + self.size)
        finally:
            os.close(fd)
        self._data = np.frombuffer(self._mm, dtype=np.uint8, offset=_HEADER)
        self._open: collections.deque = collections.deque()  # [end, finished] of payloads in use
        self._lock = threading.Lock()

    def view(self, offset: int, nbytes: int, dtype: str, shape) -> np.ndarray:
        return self._data[offset: offset + nbytes].view(np.dtype(dtype)).reshape(shape)

    def pending(self, end: int):
        """Register the next payload (ending at ``end``); returns the callback that frees it.

        Payloads may be finished out of order (the writer's job threads); the tail moves past a
        payload only once it and every earlier one are finished.
        """
        with self._lock:
            entry = [end, False]
            self._open.append(entry)

        def done():
            with self._lock:
                entry[1] = True
                tail = None
                while self._open and self._open[0][1]:
                    tail = self._open.popleft()[0]
                if tail is not None:
                    self.consumed(tail)
        return done

    def consumed(self, end: int) -> None:
        _TAIL.pack_into(self._mm, 0, end)


def backoff(seconds: float = 2e-4) -> None:
    time.sleep(seconds)

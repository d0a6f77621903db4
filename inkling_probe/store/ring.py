"""A shared-memory ring that carries large tensors from the recording process to the writer process.

Sending a large tensor down the pipe costs two copies (into and out of the kernel); through the ring
it costs one copy in the recording process, and the writer reads it in place. The first 8 bytes hold
the writer's ``tail`` (bytes consumed so far, monotonic); the recording process owns ``head``.
Space is reused only after the writer has moved ``tail`` past it.

The ring is a file in /dev/shm, unlinked the moment it is created (the writer inherits its file
descriptor), so nothing outlives the processes, whenever they die. Its space is reserved up front
(``posix_fallocate``): a /dev/shm too small (Docker's default 64 MiB), full or read-only makes the
ring fall back to the temp dir, then to none (everything through the pipe), with one warning line,
instead of a SIGBUS at the first write.
"""
from __future__ import annotations

import mmap
import os
import struct
import tempfile
import time

import numpy as np

_TAIL = struct.Struct("<q")
_HEADER = _TAIL.size


class RingFull(RuntimeError):
    """The writer stopped consuming while the recording process waited for ring space."""


SHM_DIR = "/dev/shm"


def reserve(size: int, warn) -> tuple[int, int] | None:
    """(fd, size) of an unlinked, fully reserved ring file, or None (no space anywhere).

    Tries ``size`` then ``size // 4`` in /dev/shm, then the temp dir; ``warn(text)`` is called once
    when the ring leaves /dev/shm or is given up.
    """
    failures = []
    for where, n in ((SHM_DIR, size), (SHM_DIR, size // 4), (tempfile.gettempdir(), size)):
        fd = _reserved_file(where, _HEADER + n, failures)
        if fd is not None:
            if where != SHM_DIR:
                warn(f"inkling-probe: {failures[0]}; the writer's ring is in {where} instead")
            return fd, n
    warn(f"inkling-probe: {failures[0]}; large tensors go through the pipe (slower)")
    return None


def _reserved_file(where: str, nbytes: int, failures: list) -> int | None:
    try:
        fd, path = tempfile.mkstemp(prefix="inkling-probe-ring-", dir=where)
    except OSError as e:
        failures.append(f"no ring in {where} ({e.strerror or e})")
        return None
    os.unlink(path)
    try:
        os.posix_fallocate(fd, 0, nbytes)
        return fd
    except OSError as e:
        os.close(fd)
        failures.append(f"no {nbytes >> 20} MiB ring in {where} ({e.strerror or e})")
        return None


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
    """Writer-process side: map the inherited ring file, read payloads in place."""

    def __init__(self, fd: int, size: int):
        try:
            self._mm = mmap.mmap(fd, _HEADER + size)
        finally:
            os.close(fd)
        self._data = np.frombuffer(self._mm, dtype=np.uint8, offset=_HEADER)

    def view(self, offset: int, nbytes: int, dtype: str, shape) -> np.ndarray:
        return self._data[offset: offset + nbytes].view(np.dtype(dtype)).reshape(shape)

    def consumed(self, end: int) -> None:
        _TAIL.pack_into(self._mm, 0, end)


def backoff(seconds: float = 2e-4) -> None:
    time.sleep(seconds)

"""A shared-memory ring that carries large tensors from the recording process to the writer process.

Sending a large tensor down the pipe costs two copies (into and out of the kernel); through the ring
it costs one copy in the recording process, and the writer reads it in place. The first 8 bytes hold
the writer's ``tail`` (bytes consumed so far, monotonic); the recording process owns ``head``.
Space is reused only after the writer has moved ``tail`` past it. The ring is a file in /dev/shm
(or the temp dir), unlinked by the writer as soon as it has mapped it, so nothing outlives both.
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


class RingWriter:
    """Recording-process side: copy payloads in, wait for space when the writer lags."""

    def __init__(self, size: int):
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, self.path = tempfile.mkstemp(prefix="inkling-probe-ring-", dir=shm)
        try:
            os.ftruncate(fd, _HEADER + size)
            self._mm = mmap.mmap(fd, _HEADER + size)
        finally:
            os.close(fd)
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
        try:
            os.unlink(self.path)  # normally the writer has already unlinked it
        except FileNotFoundError:
            pass


class RingReader:
    """Writer-process side: map the ring, unlink its name, read payloads in place."""

    def __init__(self, path: str, size: int):
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, _HEADER + size)
        finally:
            os.close(fd)
            os.unlink(path)
        self._data = np.frombuffer(self._mm, dtype=np.uint8, offset=_HEADER)

    def view(self, offset: int, nbytes: int, dtype: str, shape) -> np.ndarray:
        return self._data[offset: offset + nbytes].view(np.dtype(dtype)).reshape(shape)

    def consumed(self, end: int) -> None:
        _TAIL.pack_into(self._mm, 0, end)


def backoff(seconds: float = 2e-4) -> None:
    time.sleep(seconds)

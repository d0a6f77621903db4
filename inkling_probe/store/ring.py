"""A shared-memory ring that carries large tensors from the recording process to the writer process.

Sending a large tensor down the pipe costs two copies (into and out of the kernel); through the ring
it costs one copy in the recording process, and the writer reads it in place. GPU recording copies
device tensors straight into the ring (a :meth:`RingWriter.slot`, the ring registered as pinned
memory: staging.RingStager), so the recording process copies nothing. The first bytes hold the
writer's ``tail`` (bytes consumed so far, monotonic); the recording process owns ``head``. Each
payload is the interval [start, end) of the head's sequence; space is reused only after the writer
has moved ``tail`` past it, which it does over finished payloads in head order, whatever order
they were sent or finished in.

The ring is a file in /dev/shm (the temp dir where /dev/shm is missing or read-only), unlinked the
moment it is created (the writer inherits its file descriptor), so nothing outlives the processes,
whenever they die. The writer reserves its space (``posix_fallocate``) and says so; until then,
and for good if it can't (a /dev/shm too small for even a quarter of the ring, or full), large
tensors go through the pipe, with one warning line, instead of a SIGBUS at the first write.

The ring's first MiB (before the data) holds the writer's ``tail`` and the **message log**: a copy
of the frames the recording process has batched but not yet written to the pipe (it batches a few
MB of large tensors' messages into one write, not one write a tensor). The log is shared memory,
so when the recording process dies, whatever it had batched is still there: the writer applies the
logged frames it never received before it closes the segment (writer_process.py).
"""
from __future__ import annotations

import mmap
import os
import struct
import tempfile
import threading
import time

import numpy as np

_TAIL = struct.Struct("<q")
_LOG_LENGTH = struct.Struct("<q")  # at byte 8: how many bytes of the message log are valid
_LOG_START = 64
_HEADER = 1 << 20  # tail, log length and the message log; page-aligned data (it may be registered as pinned memory)
LOG_BYTES = _HEADER - _LOG_START
_ALIGN = 64  # payload starts are multiples of this


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
    """Reserve the ring's space (writer side): ``size``, else half, else a quarter; OSError when
    none fits (ENOSPC, a read-only or full file system). Reserved space can't SIGBUS when written."""
    for n in (size, size // 2, size // 4):
        try:
            os.posix_fallocate(fd, 0, _HEADER + n)
            return n
        except OSError as e:
            reason = e.strerror or str(e)
    raise OSError(f"no {size >> 20} MiB ring ({reason})")


class RingWriter:
    """Recording-process side: copy payloads in (or hand out slots to fill), wait for space when the
    writer lags."""

    def __init__(self, fd: int, size: int):
        self.fd = fd  # kept open until the writer has inherited it
        self._mm = mmap.mmap(fd, _HEADER + size)
        self.size = size
        self.head = 0
        self._data = np.frombuffer(self._mm, dtype=np.uint8, offset=_HEADER)
        self._base = self._data.ctypes.data
        self._lock = threading.Lock()  # head: slots are taken by the recording thread
        self._placed: dict = {}  # data address -> (offset, start, end, nbytes) of slots not sent yet

    def address(self) -> int:
        """The mapping's first byte (page-aligned); it is ``_HEADER + size`` bytes long."""
        return self._base - _HEADER

    def mapped_bytes(self) -> int:
        return _HEADER + self.size

    def reserve(self, n: int, wait) -> tuple[int, int, int]:
        """Space for ``n`` bytes: (offset in the data, start, end) in the head's sequence.
        ``wait()`` is called while there is no space (it must check the writer, and may raise)."""
        n = -(-n // _ALIGN) * _ALIGN  # every payload starts aligned for any dtype
        if n > self.size:
            raise ValueError(f"{n} bytes do not fit a ring of {self.size}")
        with self._lock:
            start, pos = self.head, self.head % self.size
            skip = 0
            if pos + n > self.size:  # never split a payload: skip to the start of the ring
                skip, pos = self.size - pos, 0
            while start + skip + n - self.tail() > self.size:
                wait()  # may raise (Ctrl-C, a dead writer): nothing is taken until it returns
            self.head = start + skip + n
            return pos, start, self.head

    def put(self, payload: np.ndarray, wait) -> tuple[int, int, int]:
        """Copy ``payload`` (bytes view) in; returns (offset, start, end) for the writer."""
        n = payload.nbytes
        pos, start, end = self.reserve(n, wait)
        self._data[pos: pos + n] = payload.reshape(-1).view(np.uint8)
        return pos, start, end

    def slot(self, n: int, wait) -> np.ndarray:
        """A uint8 view of ``n`` reserved bytes for the caller to fill; an array over them handed to
        :meth:`placed` later is sent by position, not copied."""
        pos, start, end = self.reserve(n, wait)
        view = self._data[pos: pos + n]
        self._placed[self._base + pos] = (pos, start, end, n)
        return view

    def forget(self, view: np.ndarray) -> tuple[int, int, int] | None:
        """(offset, start, end) of a slot that will never be sent (taken, then interrupted before
        it was queued), for the writer to free; None when it was sent after all."""
        where = self._placed.pop(view.ctypes.data, None) if view.size else None
        return None if where is None else where[:3]

    def placed(self, array: np.ndarray) -> tuple[int, int, int] | None:
        """(offset, start, end) when ``array`` starts a slot and lies within it (the slot is then
        sent, and freed whole once the writer is done); None for an array outside the ring."""
        if not array.size:
            return None
        address = array.__array_interface__["data"][0]  # half of .ctypes.data's ~3 us (every tensor sent)
        where = self._placed.get(address)
        if where is None or where[3] < array.nbytes or not array.flags.c_contiguous:
            if 0 <= address - self._base < self.size:  # a slot would never be freed
                raise ValueError("an array in the ring that is not a whole slot's start")
            return None
        del self._placed[address]
        return where[:3]

    def tail(self) -> int:
        return _TAIL.unpack_from(self._mm, 0)[0]

    def log(self, frames, at: int) -> bool:
        """Copy ``frames`` (bytes) into the message log at byte ``at`` and mark the log valid up to
        their end (after the copy: a process killed mid-copy leaves the log as it was); False when
        they do not fit (the caller then writes its batch out instead)."""
        end = at + len(frames)
        if end > LOG_BYTES:
            return False
        self._mm[_LOG_START + at: _LOG_START + end] = frames
        _LOG_LENGTH.pack_into(self._mm, 8, end)
        return True

    def clear_log(self) -> None:
        """The batch the log mirrored is in the pipe: the log is empty again."""
        _LOG_LENGTH.pack_into(self._mm, 8, 0)

    def close(self) -> None:
        self._data = None
        try:
            self._mm.close()
        except BufferError:  # a view of a slot is still alive: the mapping goes with the last one
            pass
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
        self._finished: dict = {}  # start -> end of finished payloads the tail has not passed
        self._tail = 0
        self._lock = threading.Lock()

    def logged(self) -> bytes:
        """The frames the recording process batched and had not written to the pipe (read after it
        is gone: they may include frames the pipe did deliver, which carry numbers already applied)."""
        n = _LOG_LENGTH.unpack_from(self._mm, 8)[0]
        return bytes(self._mm[_LOG_START: _LOG_START + n]) if 0 < n <= LOG_BYTES else b""

    def view(self, offset: int, nbytes: int, dtype: str, shape) -> np.ndarray:
        return self._data[offset: offset + nbytes].view(np.dtype(dtype)).reshape(shape)

    def pending(self, start: int, end: int):
        """Register a payload, [start, end) of the head's sequence; returns the callback that frees it.

        Payloads may arrive and be finished out of order (slots are sent as their copies complete,
        and the writer's job threads finish in any order); the tail moves past a payload only once
        it and every one before it in the head's sequence are finished.
        """
        def done():
            with self._lock:
                self._finished[start] = end
                tail = self._tail
                while tail in self._finished:
                    tail = self._finished.pop(tail)
                if tail != self._tail:
                    self._tail = tail
                    self.consumed(tail)
        return done

    def consumed(self, end: int) -> None:
        _TAIL.pack_into(self._mm, 0, end)


def backoff(seconds: float = 2e-4) -> None:
    time.sleep(seconds)

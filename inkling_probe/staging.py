"""Asynchronous device-to-host copies for eager probes of device tensors.

A probed CUDA tensor is copied into a pinned host buffer with ``non_blocking=True`` on the current
stream (so after the kernel that produced it, and before anything later on that stream can reuse
its memory), an event is recorded behind the copy, and the (row, buffer, event) goes to a drain
thread. The forward goes on at once; the drain thread waits for each event in order, encodes the
buffer and hands it to the writer, then returns the buffer to the pool. ``step()`` and ``close()``
wait until everything queued is with the writer, so a step is on disk when ``step()`` returns,
as with synchronous copies.

The device parts (pinned buffers, copies, events) sit behind :class:`CudaStager`; tests drive the
same queue and thread with a CPU stand-in.
"""
from __future__ import annotations

import queue
import threading
from collections import defaultdict

_STOP = object()


class CudaStager:
    """Pinned staging buffers, reused by size, at most ``limit_bytes`` outstanding."""

    def __init__(self, limit_bytes: int = 1 << 30):
        self.limit = limit_bytes
        self._free: dict[int, list] = defaultdict(list)
        self._outstanding = 0
        self._room = threading.Condition()

    def stage(self, t):
        """Start copying CUDA tensor ``t`` to the host: (host tensor, event to wait on)."""
        import torch

        nbytes = t.numel() * t.element_size()
        buf = self._take(nbytes)
        host = buf[:nbytes].view(t.dtype).view(t.shape) if nbytes else torch.empty(t.shape, dtype=t.dtype)
        host.copy_(t, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, (event, buf)

    def wait(self, token) -> None:
        token[0].synchronize()

    def release(self, token) -> None:
        buf = token[1]
        with self._room:
            self._free[buf.numel()].append(buf)
            self._outstanding -= buf.numel()
            self._room.notify_all()

    def _take(self, nbytes: int):
        import torch

        with self._room:
            while self._outstanding + nbytes > self.limit and self._outstanding:
                self._room.wait()  # the drain thread frees buffers as it writes
            self._outstanding += nbytes
            if self._free[nbytes]:
                return self._free[nbytes].pop()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


class Drain:
    """A thread that writes staged tensors in probe order; its first failure is kept for the caller."""

    def __init__(self, stager, write):
        self.stager = stager
        self._write = write  # write(row, host_tensor): encode and hand to the writer
        self._queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="inkling-probe-drain", daemon=True)
        self._thread.start()

    def put(self, row: dict, t) -> None:
        """Queue ``t`` (a device tensor) for writing under ``row``."""
        host, token = self.stager.stage(t)
        self._queue.put((row, host, token))

    def flush(self) -> None:
        """Wait until everything queued so far is with the writer; re-raise a drain failure."""
        self._queue.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                row, host, token = item
                try:
                    self.stager.wait(token)
                    if self.error is None:
                        self._write(row, host)
                except BaseException as e:  # noqa: BLE001 - kept and raised in the recording thread
                    if self.error is None:
                        self.error = e
                finally:
                    self.stager.release(token)
            finally:
                self._queue.task_done()

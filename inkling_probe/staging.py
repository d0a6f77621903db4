"""Asynchronous device-to-host copies for eager probes of device tensors.

A probed CUDA tensor is copied into a pinned host buffer with ``non_blocking=True`` on the current
stream (so after the kernel that produced it, and before anything later on that stream can reuse
its memory), an event is recorded behind the copy, and the (row, buffer, event) goes to a drain
thread. A bf16 tensor is widened to float32 on the device first (the store's exact form of bf16:
its bits shifted up 16), so the host does no conversion pass. The forward goes on at once; the
drain thread waits for each event in order and hands the buffer to the writer; the buffer goes back
to the pool once the writer has copied or written it (``done``, perhaps from a writer job thread). ``step()`` and ``close()``
wait until everything queued is with the writer, so a step is on disk when ``step()`` returns,
as with synchronous copies.

The device parts (pinned buffers, copies, events) sit behind :class:`CudaStager`; tests drive the
same queue and thread with a CPU stand-in.
"""
from __future__ import annotations

import queue
import threading
from collections import OrderedDict

_STOP = object()


class CudaStager:
    """Pinned staging buffers, reused by dtype and shape: at most ``limit_bytes`` outstanding, and at
    most ``limit_bytes`` kept idle for reuse (the least recently used shapes go first)."""

    def __init__(self, limit_bytes: int = 1 << 30):
        self.limit = limit_bytes
        self._free: OrderedDict = OrderedDict()  # (dtype, shape) -> idle host tensors
        self._free_bytes = 0
        self._events: list = []
        self._outstanding = 0
        self._room = threading.Condition()

    def stage(self, t):
        """Start copying CUDA tensor ``t`` to the host: (host tensor, token to wait on). The host
        tensor of a bf16 ``t`` is its float32 widening (bit-exact)."""
        import torch

        src = t.float() if t.dtype is torch.bfloat16 else t  # [*t.shape] fp32: bf16 bits << 16
        host = self._take(src.dtype, tuple(src.shape), src.numel() * src.element_size())
        host.copy_(src, non_blocking=True)
        with self._room:
            event = self._events.pop() if self._events else torch.cuda.Event()
        event.record()
        return host, (event, host)

    def wait(self, token) -> None:
        token[0].synchronize()

    def release(self, token) -> None:
        event, host = token
        nbytes = host.numel() * host.element_size()
        with self._room:
            self._events.append(event)
            self._outstanding -= nbytes
            key = (host.dtype, tuple(host.shape))
            self._free.setdefault(key, []).append(host)
            self._free.move_to_end(key)
            self._free_bytes += nbytes
            while self._free_bytes > self.limit:  # idle buffers past the limit: unpin the oldest
                old_key, idle = next(iter(self._free.items()))
                dropped = idle.pop()
                self._free_bytes -= dropped.numel() * dropped.element_size()
                if not idle:
                    del self._free[old_key]
            self._room.notify_all()

    def _take(self, dtype, shape: tuple, nbytes: int):
        import torch

        with self._room:
            while self._outstanding + nbytes > self.limit and self._outstanding:
                self._room.wait()  # the drain thread frees buffers as it writes
            self._outstanding += nbytes
            idle = self._free.get((dtype, shape))
            if idle:
                self._free_bytes -= nbytes
                host = idle.pop()
                if not idle:
                    del self._free[(dtype, shape)]
                return host
        return torch.empty(shape, dtype=dtype, pin_memory=nbytes > 0)


class Drain:
    """A thread that writes staged tensors in probe order; its first failure is kept for the caller."""

    def __init__(self, stager, write):
        self.stager = stager
        self._write = write  # write(row, host_tensor, done): encode, hand to the writer; done() once it has it
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
                done = _once(lambda token=token: self.stager.release(token))
                try:
                    self.stager.wait(token)
                    if self.error is None:
                        self._write(row, host, done)
                    else:
                        done()
                except BaseException as e:  # noqa: BLE001 - kept and raised in the recording thread
                    done()
                    if self.error is None:
                        self.error = e
            finally:
                self._queue.task_done()


def _once(action):
    """``action`` wrapped to run at most once, from whichever thread calls first."""
    lock, ran = threading.Lock(), [False]

    def run():
        with lock:
            if ran[0]:
                return
            ran[0] = True
        action()
    return run

"""Asynchronous device-to-host copies for eager probes of device tensors.

A probed CUDA tensor is copied into a pinned host buffer with ``non_blocking=True`` on the current
stream (so after the kernel that produced it, and before anything later on that stream can reuse
its memory), an event is recorded behind the copy, and the (row, buffer, event) is queued for the
drain (drain.py). bf16 stays 2 bytes a value all the way to the file (the store keeps bf16 as
itself), so the host does no conversion pass. The forward goes on at once; the drain hands each buffer to
the writer once its event has completed, in order (with the process writer the recording thread
itself does, at its next probes; with the inline writer a drain thread); the buffer goes back to
the pool once the writer has copied or written it (``done``, perhaps from a writer job thread).
``step()`` and ``close()`` wait until everything queued is with the writer, so a step is on disk
when ``step()`` returns, as with synchronous copies.

Float32 and bf16 tensors (nearly everything a model records) are not copied one by one: they are
gathered into device buffers first (step_batch.py), whose copies land in host buffers of the
stager's (:meth:`CudaStager.batch_host`).

The device parts (pinned buffers, copies, events) sit behind :class:`CudaStager`; tests drive the
same queue, drain and batches with CPU stand-ins.
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict

from inkling_probe.recorder.cudart import _clear_cuda_error
from inkling_probe.recorder.step_batch import _aligned, _pow2


class CudaStager:
    """Pinned staging buffers, reused by dtype and shape: at most ``limit_bytes`` outstanding, and at
    most ``limit_bytes`` kept idle for reuse (the least recently used shapes go first)."""

    def __init__(self, limit_bytes: int = 1 << 30):
        self.limit = limit_bytes
        self._free: OrderedDict = OrderedDict()  # (dtype, shape) -> idle host tensors
        self._free_bytes = 0
        self._events: dict = {}  # device index -> idle events (an event recorded on one device
        # cannot be recorded on another's stream)
        self._outstanding = 0
        self._room = threading.Condition()
        self._side: dict = {}  # device -> the stream batches are summarised and copied out on
        self.unqueued: list = []  # ring slots taken since the drain last queued an item (RingStager)
        self._drain = None  # the drain that empties this stager (drained_by), asked while waiting for room

    def drained_by(self, drain) -> None:
        """``drain`` (drain.py's Drain) hands what this stager staged to the writer: a wait for room
        asks it to hand over what it holds (``drain.relieve()``) and ends on its failure
        (``drain.cancelled()``, the ring's wait)."""
        self._drain = drain

    def side_stream(self, device):
        """The stream a sealed batch's statistics and copy to the host run on, one per device: the
        model's stream never waits on them."""
        import torch

        stream = self._side.get(device)
        if stream is None:
            stream = self._side[device] = torch.cuda.Stream(device)
        return stream

    def stage(self, t):
        """Start copying CUDA tensor ``t`` to the host: (host tensor of its dtype and shape, token to
        wait on)."""
        host = self.take(t.dtype, tuple(t.shape))
        host.copy_(t, non_blocking=True)
        return host, (self.record(), [host])

    def record(self, stream=None):
        """An event recorded now on ``stream`` (default: the current stream), after the copies
        queued on it so far."""
        import torch

        device = stream.device.index if stream is not None else torch.cuda.current_device()
        with self._room:
            pool = self._events.setdefault(device, [])
            # blocking: the drain thread sleeps in synchronize() instead of spinning on a core that
            # the model's launches and the writer process need (scripts/bench_record_parts.py)
            event = pool.pop() if pool else torch.cuda.Event(blocking=True)
        if stream is None:
            event.record()
        else:
            event.record(stream)
        return event

    def order_after(self, stream, after) -> None:
        """Make ``stream`` wait for what is queued on ``after`` so far (a pooled event:
        ``wait_stream`` would create and destroy one each time). ``after`` is the stream the work
        was queued on, not the current one: a batch is sealed when the next probe runs on another
        stream, and its copy out must still follow its own stream's copies."""
        event = self.record(after)
        stream.wait_event(event)
        self._give_event(event)  # the wait took the event's state: it may be recorded again

    def _give_event(self, event) -> None:
        with self._room:
            self._events.setdefault(event.device.index, []).append(event)

    def wait(self, token) -> None:
        token[0].synchronize()

    def ready(self, token) -> bool:
        """Has the copy behind ``token`` finished (no wait)?"""
        return token[0].query()

    def release(self, token) -> None:
        """Give back a token's event and host buffers (the writer has them on disk or copied)."""
        event, hosts = token
        self._give_event(event)
        with self._room:
            for host in hosts:
                self._give_back(host)
            while self._free_bytes > self.limit:  # idle buffers past the limit: unpin the oldest
                old_key, idle = next(iter(self._free.items()))
                dropped = idle.pop()
                self._free_bytes -= dropped.numel() * dropped.element_size()
                if not idle:
                    del self._free[old_key]
            self._room.notify_all()

    def _give_back(self, host) -> None:
        nbytes = host.numel() * host.element_size()
        self._outstanding -= nbytes
        key = (host.dtype, tuple(host.shape))
        self._free.setdefault(key, []).append(host)
        self._free.move_to_end(key)
        self._free_bytes += nbytes

    def batch_host(self, dtype, used: int, capacity: int):
        """(host tensor of at least ``used`` values for a batch's copy, pooled?): a pooled pinned
        buffer of a power-of-two size (given back on release when pooled)."""
        return self.take(dtype, (_bucket(used, capacity),)), True

    def close(self) -> None:
        """Nothing to undo for pooled pinned buffers (the ring stager unregisters its ring)."""

    def take(self, dtype, shape: tuple, wait: bool = True):
        """A pinned host tensor of this dtype and shape: an idle one, else a new one; waits while
        ``limit_bytes`` are outstanding (unless told not to: small companions of a buffer taken)."""
        import torch

        nbytes = math.prod(shape) * dtype.itemsize
        with self._room:
            while wait and self._outstanding + nbytes > self.limit and self._outstanding:
                if self._drain is not None:  # without a drain thread: everything queued handed over
                    before = self._outstanding
                    self._drain.relieve()  # (the lock is reentrant: release() takes it too)
                    if self._outstanding < before:
                        continue
                self._room.wait(0.01)  # the drain thread (or a writer job) frees buffers as it writes
            self._outstanding += nbytes
            idle = self._free.get((dtype, shape))
            if idle:
                self._free_bytes -= nbytes
                host = idle.pop()
                if not idle:
                    del self._free[(dtype, shape)]
                return host
        return torch.empty(shape, dtype=dtype, pin_memory=nbytes > 0)


class RingStager(CudaStager):
    """Copies straight into the writer process's shared ring (store/ring.py), registered as pinned
    memory: a batch's buffer and a large tensor land where the writer reads them, and are sent by
    position, so the recording process copies nothing on the host (a pooled pinned buffer and a
    memcpy into the ring cost its drain ~3.5 ms per 16 MB batch, at the step's end too).

    ``ring`` is a :class:`~inkling_probe.store.ring.RingWriter` claimed from the process writer
    (so only these slots go through it, in the order they are queued); ``wait`` is called while the
    ring is full (it raises if the writer died); a wait for space ends on the drain's failure
    (:meth:`drained_by`), which nothing would free. Small tensors, tensors whose stored form is not
    their bytes (8-bit floats) and anything too large for the ring use pooled buffers.
    """

    def __init__(self, ring, wait, limit_bytes: int = 1 << 30):
        super().__init__(limit_bytes)
        self.ring, self._wait = ring, wait
        self.min_bytes = 64 << 10
        self._address = ring.address()
        _host_register(self._address, ring.mapped_bytes())  # OSError: the caller stages as before

    def _slot(self, dtype, numel: int):
        """A host tensor of ``numel`` values of ``dtype`` in a ring slot, or None (not for the ring)."""
        import torch

        nbytes = numel * dtype.itemsize
        if not self.min_bytes <= nbytes <= self.ring.size // 2:
            return None
        view = self.ring.slot(nbytes, self._wait_for_space)
        self.unqueued.append(view)
        return torch.from_numpy(view).view(dtype)

    def _wait_for_space(self) -> None:
        drain = self._drain
        if drain is not None:
            failure = drain.cancelled()
            if failure is not None:
                raise failure
            drain.relieve()  # the writer can only free space for what it was sent
        self._wait()

    def batch_host(self, dtype, used: int, capacity: int):
        host = self._slot(dtype, used)
        return (host, False) if host is not None else super().batch_host(dtype, used, capacity)

    def stage(self, t):
        from inkling_probe.store.dtypes import FP8, E8M0

        host = None if t.dtype in FP8 or t.dtype is E8M0 else self._slot(t.dtype, t.numel())
        if host is None:  # stored as another form (encode makes a new array) or small: pooled
            return super().stage(t)
        host = host.view(t.shape)
        host.copy_(t, non_blocking=True)
        return host, (self.record(), [])

    def close(self) -> None:
        """Unregister the ring (before the writer unmaps it); every copy into it has completed."""
        if self._address is not None:
            _host_unregister(self._address)
            self._address = None


def _host_register(address: int, nbytes: int) -> None:
    """Pin host memory for the device's copy engine (cudaHostRegister); OSError if refused."""
    import torch

    try:
        error = torch.cuda.cudart().cudaHostRegister(address, nbytes, 0)
    except (RuntimeError, AttributeError) as e:  # no CUDA runtime binding here
        raise OSError(f"cudaHostRegister of the writer's ring is not available ({e})") from None
    if int(error) != 0:
        _clear_cuda_error()
        raise OSError(f"cudaHostRegister of the writer's ring failed (CUDA error {int(error)})")


def _host_unregister(address: int) -> None:
    import torch

    unregister = getattr(torch.cuda.cudart(), "cudaHostUnregister", None)
    if unregister is not None and int(unregister(address)) != 0:
        _clear_cuda_error()


def _bucket(used: int, capacity: int) -> int:
    """The host buffer size for ``used`` values: the next power of two (at least 64K), at most
    ``capacity`` (rounded up to whole rows); few distinct sizes, so pinned buffers are reused, and a
    small batch pins little."""
    return min(_aligned(capacity), max(1 << 16, _pow2(used)))

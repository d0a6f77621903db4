"""Asynchronous device-to-host copies for eager probes of device tensors.

A probed CUDA tensor is copied into a pinned host buffer with ``non_blocking=True`` on the current
stream (so after the kernel that produced it, and before anything later on that stream can reuse
its memory), an event is recorded behind the copy, and the (row, buffer, event) is queued for the
:class:`Drain`. bf16 stays 2 bytes a value all the way to the file (the store keeps bf16 as itself),
so the host does no conversion pass. The forward goes on at once; the drain hands each buffer to
the writer once its event has completed, in order (with the process writer the recording thread
itself does, at its next probes; with the inline writer a drain thread); the buffer goes back to
the pool once the writer has copied or written it (``done``, perhaps from a writer job thread).
``step()`` and ``close()`` wait until everything queued is with the writer, so a step is on disk
when ``step()`` returns, as with synchronous copies.

Float32 and bf16 tensors (nearly everything a model records) are not copied one by one: each is
copied into a slice of the open device buffer of its dtype (:class:`StepBatch`, one copy a probe,
issued with the CUDA runtime's ``cudaMemcpyAsync`` where it can). When the buffer fills, the stream
changes or the step ends, four kernels compute per-row statistics of the whole buffer
(:func:`row_stats`) and one copy brings buffer and row statistics to pinned host buffers; the drain
adds each tensor's rows up. So the host never makes a pass over the values for statistics, and the
recording thread issues one copy per probe (the model is launch-bound: the recording thread's
launches are what a recorded forward pays for).

The device parts (pinned buffers, copies, events) sit behind :class:`CudaStager`; tests drive the
same queue, drain and batches with CPU stand-ins.
"""
from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict

from inkling_probe.recorder.cudart import (_DEVICE_TO_DEVICE, _check_cuda, _clear_cuda_error, _current_device,
                                           _current_stream, _device_memcpy, _on_stream,
                                           _stream_key)
from inkling_probe.recorder.drain import Drain  # noqa: F401 - re-exported (its home before the split)

_UNSET = object()  # an argument not given (None is a CPU tensor's stream key)


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
        self.relieve = None  # called before waiting for room: hands queued items over (an unthreaded Drain)

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
                if self.relieve is not None:  # no drain thread: hand everything queued over
                    before = self._outstanding
                    self.relieve()  # (the lock is reentrant: release() takes it too)
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
    ring is full (it raises if the writer died); ``cancelled()`` returns the drain's failure, if any,
    so a wait for space that a failed drain can never free ends. Small tensors, tensors whose stored
    form is not their bytes (8-bit floats) and anything too large for the ring use pooled buffers.
    """

    def __init__(self, ring, wait, limit_bytes: int = 1 << 30):
        super().__init__(limit_bytes)
        self.ring, self._wait = ring, wait
        self.cancelled = lambda: None
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
        failure = self.cancelled()
        if failure is not None:
            raise failure
        if self.relieve is not None:
            self.relieve()  # the writer can only free space for what it was sent
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



class StepBatch:
    """Consecutive probes of one dtype (float32 or bf16) in one device buffer of ``capacity`` values.

    Each tensor starts at a multiple of :data:`ROW` values (the gap after it is zeros), so the buffer
    reads as [rows, ROW] and no row holds two tensors: :meth:`seal` reduces each row with a handful
    of kernels (:func:`row_stats`, no per-tensor launches) and the drain adds a tensor's rows up on
    the host (store.batch.sums_from_rows). :meth:`append` queues one copy kernel; :meth:`seal` queues
    the statistics and the copy of everything to one pinned host buffer, and returns what the
    drain needs.
    """

    def __init__(self, stager, capacity: int = 8 << 20, stats: bool = True):
        self.stager, self.capacity, self.stats = stager, capacity, stats
        self.rows: list[dict] = []
        self._spans: list[tuple] = []  # (offset, numel, shape) of each tensor in the buffer
        self._used = 0  # values taken, gaps included: a multiple of ROW
        self._buffer = None  # [capacity] float32 or bf16 on the batch's device
        self._stream = None  # the stream the batch's copies were queued on
        self._stream_key = None
        self._memcpy = None  # the runtime's cudaMemcpyAsync for this batch's copies (CUDA, else None)
        self._base, self._itemsize = 0, 0  # the buffer's device address and value size

    def __len__(self) -> int:
        return len(self.rows)

    def sibling(self) -> "StepBatch":
        """An empty batch with this one's stager, capacity and statistics setting."""
        return StepBatch(self.stager, self.capacity, self.stats)

    def takes(self, t) -> bool:
        """Can ``t`` ever go into a batch (float32 or bf16, not empty, at most half the buffer)?"""
        return t.dtype in _batched() and 0 < t.numel() <= self.capacity // 2

    def takes_alone(self, t) -> bool:
        """Too large to share the buffer, but a batch of its own (statistics on the device)? Up to
        ``capacity`` values, so its device copy and the statistics' float64 temporary take no more
        device memory than a full batch's; larger tensors are copied to the host one by one."""
        return t.dtype in _batched() and self.capacity // 2 < t.numel() <= self.capacity

    def fits(self, t, key=_UNSET) -> bool:
        """Can ``t`` join the open batch now (room, same dtype, device and stream)? ``key``:
        ``_stream_key(t)`` when the caller has it (the per-probe path asks once)."""
        if not self.rows:
            return True
        return (self._used + t.numel() <= self.capacity and t.dtype == self._buffer.dtype
                and (_stream_key(t) if key is _UNSET else key) == self._stream_key)

    def append(self, row: dict, t, key=_UNSET) -> None:
        """Queue the copy of ``t`` into the buffer under ``row`` (``key``: as for :meth:`fits`)."""
        if key is _UNSET:
            key = _stream_key(t)
        if not self.rows:  # zeros: the gaps between tensors add nothing to a row's statistics
            import torch

            self._buffer = torch.zeros(_aligned(self.capacity), dtype=t.dtype, device=t.device)
            self._stream, self._stream_key, self._used = _current_stream(t), key, 0
            self._memcpy = _device_memcpy() if t.is_cuda else None
            self._base, self._itemsize = self._buffer.data_ptr(), t.element_size()
        n, at, shape = t.numel(), self._used, tuple(t.shape)
        if self._memcpy is not None and key[0] == _current_device() and t.is_contiguous():
            size = self._itemsize  # one copy on the stream, without torch's dispatch (~15 us a probe)
            _check_cuda(self._memcpy(self._base + at * size, t.data_ptr(), n * size, _DEVICE_TO_DEVICE,
                                     self._stream_key[1]))
        else:  # one kernel: gather (as_strided: a third of slice-and-view's Python cost)
            self._buffer.as_strided(shape, _contiguous_strides(shape), at).copy_(t)
        self._spans.append((at, n, shape))
        self._used = -(-(at + n) // ROW) * ROW  # _aligned, inline: once a probe
        self.rows.append(row)

    def seal(self):
        """Queue statistics and the copy to the host: (rows, host buffer, token, spans, row stats or None).

        ``row stats`` is a host [4, m] float64 tensor, :func:`row_stats` of the buffer's m rows,
        valid once the token's event is (store.batch.sums_from_rows makes them per tensor). None for a
        batch of fewer than :data:`DEVICE_STATS_MIN` values (the writer computes them).
        """
        import torch

        rows, spans, used = self.rows, self._spans, self._used
        side = None
        if self._stream is not None:  # CUDA: the rest on the side stream, after what is queued so far
            side = self.stager.side_stream(self._buffer.device)
            self.stager.order_after(side, self._stream)
            self._buffer.record_stream(side)  # not reused by the model's stream until side is done
        with _on_stream(side):
            host, pooled = self.stager.batch_host(self._buffer.dtype, used, self.capacity)
            host[:used].copy_(self._buffer[:used], non_blocking=True)
            hosts, stats = [host] if pooled else [], None
            if self.stats and used >= DEVICE_STATS_MIN:  # smaller: the writer's host pass is cheaper
                m = used // ROW
                pinned = self.stager.take(torch.float64, (_pow2(4 * m),), wait=False)
                stats = pinned[: 4 * m].view(4, m)
                stats.copy_(row_stats(self._buffer[:used].view(m, ROW)), non_blocking=True)
                hosts.append(pinned)
            token = (self.stager.record(), hosts)
        self.rows, self._spans, self._used, self._buffer, self._stream = [], [], 0, None, None
        return rows, host, token, spans, stats


@functools.cache
def _batched() -> tuple:
    """The dtypes batches take: float32 and bfloat16 (torch is imported lazily)."""
    import torch

    return torch.float32, torch.bfloat16


def _pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1): few distinct pinned buffer sizes, reused."""
    return 1 << (max(n, 1) - 1).bit_length()


def _bucket(used: int, capacity: int) -> int:
    """The host buffer size for ``used`` values: the next power of two (at least 64K), at most
    ``capacity`` (rounded up to whole rows); few distinct sizes, so pinned buffers are reused, and a
    small batch pins little."""
    return min(_aligned(capacity), max(1 << 16, _pow2(used)))


DEVICE_STATS_MIN = 1 << 16  # a batch of fewer values leaves its statistics to the writer (a few
# kernel launches cost the launch-bound model more than the writer's pass over a few KB)
ROW = 1 << 12  # values a statistics row holds: tensors start at multiples of it in a batch's buffer


@functools.lru_cache(maxsize=1024)
def _contiguous_strides(shape: tuple) -> tuple:
    """The strides of a contiguous tensor of ``shape`` (a model probes a few shapes: made once each)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _aligned(n: int) -> int:
    """``n`` rounded up to whole rows."""
    return -(-n // ROW) * ROW


def row_stats(x):
    """Per row of [m, R] float32 or bf16 ``x``: [4, m] float64 of the sum, the 2-norm (the root of
    the sum of squares), the min and the max.

    Four kernels whatever the number of tensors in the buffer (the launch-bound recording thread pays
    per launch; per-tensor reductions cost it ~10 ms a forward), and one float64 copy of ``x``.
    Sums in float64: no overflow, ~1e-16 rounding, deterministic. A row holding a NaN or an infinity
    has a non-finite norm; its tensor's statistics are left to the writer (store.batch.sums_from_rows).
    """
    import torch

    out = torch.empty((4, x.shape[0]), dtype=torch.float64, device=x.device)
    wide = x.double()  # once: a reduction's dtype= would make its own float64 copy each
    torch.sum(wide, 1, out=out[0])
    torch.linalg.vector_norm(wide, 2, dim=1, out=out[1])
    torch.aminmax(wide, dim=1, out=(out[2], out[3]))  # the float64 copy's extremes are x's, exactly
    return out

"""Float32 and bf16 probes gathered on the device: each is copied into a slice of the open device
buffer of its dtype (:class:`StepBatch`, one copy a probe, issued with the CUDA runtime's
``cudaMemcpyAsync`` where it can). When the buffer fills, the stream changes or the step ends, four
kernels compute per-row statistics of the whole buffer (:func:`row_stats`) and one copy brings buffer
and row statistics to pinned host buffers (the stager's, staging.py); the drain hands them to the
writer, which adds each tensor's rows up. So the host never makes a pass over the values for
statistics, and the recording thread issues one copy per probe (the model is launch-bound: the
recording thread's launches are what a recorded forward pays for).
"""
from __future__ import annotations

import functools

from inkling_probe.recorder.cudart import (_DEVICE_TO_DEVICE, _check_cuda, _current_device, _current_stream,
                                           _device_memcpy, _on_stream, _stream_key)

_UNSET = object()  # an argument not given (None is a CPU tensor's stream key)
DEVICE_STATS_MIN = 1 << 16  # a batch of fewer values leaves its statistics to the writer (a few
# kernel launches cost the launch-bound model more than the writer's pass over a few KB)
ROW = 1 << 12  # values a statistics row holds: tensors start at multiples of it in a batch's buffer


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

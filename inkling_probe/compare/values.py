"""Tensor values as float64, for every stored dtype, in bounded chunks.

Metrics and hypotheses compute in float64 whatever the recorded dtype: bf16, fp16, the fp8 types
and e8m0 upcast exactly; ints and bools become their numbers; packed fp4 (``float4_e2m1fn_x2``,
two E2M1 values per byte, even element in the low nibble) is unpacked to its values, so a packed
``[.., n]`` tensor reads as ``[.., 2n]`` values.
"""
from __future__ import annotations

import torch

from inkling_probe.store.dtypes import FP4X2

CHUNK = 1 << 19  # elements per float64 chunk (4 MiB): bounds the temporaries of any metric
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float64)


def is_packed_fp4(t: torch.Tensor) -> bool:
    return FP4X2 is not None and t.dtype is FP4X2


def unpack_fp4(t: torch.Tensor) -> torch.Tensor:
    """Packed fp4 bytes ``[.., n]`` -> float64 values ``[.., 2n]`` (low nibble first)."""
    b = t.view(torch.uint8) if is_packed_fp4(t) else t
    if b.dtype is not torch.uint8:
        raise TypeError(f"unpack_fp4 needs packed fp4 or uint8 bytes, got {b.dtype}")
    lo, hi = (b & 0xF).long(), (b >> 4).long()  # [.., n]
    pairs = torch.stack([E2M1[lo], E2M1[hi]], dim=-1)  # [.., n, 2]
    return pairs.reshape(*b.shape[:-1], 2 * b.shape[-1]) if b.dim() else pairs.reshape(2)


def values(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as a float64 tensor (same shape; packed fp4 unpacked along the last dim)."""
    if is_packed_fp4(t):
        return unpack_fp4(t)
    if t.is_complex():
        raise TypeError("complex tensors are not supported by compare")
    if t.dtype is torch.float64:
        return t
    if t.dtype.is_floating_point and t.element_size() == 1:
        return t.float().double()  # fp8 / e8m0: cast through fp32
    return t.double()


def flat(t: torch.Tensor) -> torch.Tensor:
    """A flat view of the tensor's values in its own dtype (packed fp4 unpacked first)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if is_packed_fp4(t):
        return unpack_fp4(t).reshape(-1)
    return t.reshape(-1)


class Workspace:
    """Preallocated float64 chunk buffers: fresh 4 MiB temporaries per op cost page faults that
    make elementwise work ~10x slower than into reused buffers."""

    def __init__(self, size: int):
        self.size = size
        self.r, self.c, self.d, self.t = (torch.empty(size, dtype=torch.float64) for _ in range(4))
        self.b = torch.empty(size, dtype=torch.bool)


_WORKSPACE: Workspace | None = None


def workspace() -> Workspace:
    global _WORKSPACE
    if _WORKSPACE is None or _WORKSPACE.size != CHUNK:
        _WORKSPACE = Workspace(CHUNK)
    return _WORKSPACE


def chunks(r: torch.Tensor, c: torch.Tensor, work: Workspace | None = None):
    """Yield (start, r64, c64): float64 copies of equally long flat tensors, chunk by chunk,
    in the workspace's buffers (valid until the next chunk)."""
    work = work or workspace()
    n, size = r.numel(), work.size
    for start in range(0, n, size):
        m = min(size, n - start)
        yield start, _as64(r[start: start + m], work.r[:m]), _as64(c[start: start + m], work.c[:m])


def _as64(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    if x.dtype.is_floating_point and x.element_size() == 1:
        x = x.float()  # fp8 / e8m0 through fp32
    return buf.copy_(x)


def unravel(flat_index: int, shape) -> list[int]:
    """The multi-dim index of a flat (row-major) position."""
    out = []
    for size in reversed(tuple(shape)):
        out.append(flat_index % size if size else 0)
        flat_index //= size if size else 1
    return list(reversed(out))


def value_shape(t: torch.Tensor) -> tuple[int, ...]:
    """The shape of :func:`values` (packed fp4 holds two values per byte)."""
    if is_packed_fp4(t):
        return (*t.shape[:-1], 2 * t.shape[-1]) if t.dim() else (2,)
    return tuple(t.shape)

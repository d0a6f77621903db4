"""Tensor values as float64 numpy, for every stored dtype, in bounded chunks (no torch needed).

The reader hands arrays in their stored types (bf16 as exact float32, the 8-bit floats as exact
float16, packed fp4 as uint8 bytes); metrics and hypotheses compute in float64 whatever the
recorded dtype. Packed fp4 (``float4_e2m1fn_x2``, two E2M1 values per byte, even element in the
low nibble) is unpacked to its values, so a packed ``[.., n]`` array reads as ``[.., 2n]`` values.
torch tensors are accepted too (converted through their own module, never imported here).
"""
from __future__ import annotations

import sys

import numpy as np

CHUNK = 1 << 19  # elements per float64 chunk (4 MiB): bounds the temporaries of any metric
# values the compiled pass (compare/fused.py) sums in one run: a row, a part of a wider row, or a run
# of values that are not rows
BLOCK = 4096
FP4 = "float4_e2m1fn_x2"
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


class Values:
    """An array of values with the name of its original dtype (``packed``: fp4 bytes)."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype: str):
        self.array, self.dtype = array, dtype

    @property
    def packed(self) -> bool:
        return self.dtype == FP4


def from_any(x, dtype: str | None = None) -> Values:
    """Values from a numpy array (``dtype`` names its original dtype) or a torch tensor."""
    if isinstance(x, Values):
        return x
    if hasattr(x, "detach"):  # a torch tensor: convert without importing torch here
        return _from_torch(x)
    a = np.asarray(x)
    return Values(a, dtype or a.dtype.name)


def _from_torch(t) -> Values:
    t = t.detach().cpu()
    name = str(t.dtype).removeprefix("torch.")
    if name == FP4:
        torch = sys.modules[type(t).__module__.split(".")[0]]  # already imported by the caller
        return Values(t.view(torch.uint8).numpy(), FP4)
    if t.is_complex():
        raise TypeError("complex tensors are not supported by compare")
    if t.dtype.is_floating_point and name not in ("float64", "float32", "float16"):
        return Values(t.float().numpy(), name)  # bf16, fp8, e8m0: exact in float32
    return Values(t.numpy(), name)


def unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """Packed fp4 bytes ``[.., n]`` (uint8, even element in the low nibble) -> float64 ``[.., 2n]``."""
    b = np.asarray(packed)
    if b.dtype != np.uint8:
        raise TypeError(f"unpack_fp4 needs uint8 bytes, got {b.dtype}")
    out = np.empty((*b.shape[:-1], 2 * b.shape[-1]) if b.ndim else (2,))
    out[..., 0::2] = E2M1[b & 0xF]
    out[..., 1::2] = E2M1[b >> 4]
    return out


def value_shape(v: Values) -> tuple[int, ...]:
    """The shape of the values (packed fp4 holds two values per byte)."""
    s = v.array.shape
    if v.packed:
        return (*s[:-1], 2 * s[-1]) if s else (2,)
    return tuple(s)


def as_float64(v) -> np.ndarray:
    """The whole array's values as float64 (same shape; packed fp4 unpacked along the last dim)."""
    v = from_any(v)
    if v.packed:
        return unpack_fp4(v.array)
    return np.asarray(v.array, dtype=np.float64)


def flat(v: Values) -> np.ndarray:
    """A flat view of the values in their stored type (packed fp4 unpacked first)."""
    if v.packed:
        return unpack_fp4(v.array).reshape(-1)
    if v.array.dtype.kind == "c":
        raise TypeError("complex tensors are not supported by compare")
    return v.array.reshape(-1)


def chunks(r: np.ndarray, c: np.ndarray, size: int | None = None):
    """Yield (start, r64, c64): float64 copies of equally long flat arrays, chunk by chunk."""
    size = size or CHUNK
    for start in range(0, r.size, size):
        stop = min(start + size, r.size)
        yield start, r[start:stop].astype(np.float64), c[start:stop].astype(np.float64)


def unravel(flat_index: int, shape) -> list[int]:
    """The multi-dim index of a flat (row-major) position."""
    out = []
    for size in reversed(tuple(shape)):
        out.append(flat_index % size if size else 0)
        flat_index //= size if size else 1
    return list(reversed(out))


def is_integer(dtype: str) -> bool:
    """Integer and bool dtypes (by name); packed fp4 bytes are not integers."""
    return dtype.startswith(("int", "uint", "bool")) and dtype != FP4


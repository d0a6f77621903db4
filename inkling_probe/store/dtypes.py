"""How each torch dtype is stored so that plain HDF5 tools read numbers and we read it back bit-exact.

- native: float64/32/16, ints, uint8, bool are stored as they are; so is bfloat16 (schema 3): its
  bits as uint16 here, written with HDF5's bfloat16 float type (schema.bf16_file_type), which plain
  tools convert to float32 numbers. Read back, bf16 comes as its exact float32 (bits << 16).
- upcast: the 8-bit floats -> float16 (float8_e8m0fnu -> float32), and bfloat16 -> float32 in dumps
  of schema 2 and before. Every value of the narrow type is exactly representable in the wide one,
  so plain tools see true numbers. The upcast and its inverse are done on bit patterns (tables), so
  NaN payloads and signs survive too.
- raw: packed fp4 (float4_e2m1fn_x2) is stored as its uint8 bytes, low nibble = even element.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from inkling_probe.store.stats import bf16_bits_to_float32, float32_to_bf16_bits  # noqa: F401 - this module's API too

NATIVE = {
    torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.bool: np.bool_,
}
for _name, _np in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
    if hasattr(torch, _name):
        NATIVE[getattr(torch, _name)] = _np

FP8 = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
       if hasattr(torch, n)]
E8M0 = getattr(torch, "float8_e8m0fnu", None)
FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)


def dtype_name(dtype: torch.dtype) -> str:
    """'float32', 'bfloat16', 'float8_e4m3fn', ... (torch's name without the 'torch.' prefix)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype is not FP4X2


@functools.lru_cache(maxsize=None)
def _byte_tables(dtype: torch.dtype):
    """up[byte] = the wide (fp16 or fp32) bit pattern of each byte's value; NaNs tagged by byte."""
    codes = torch.arange(256, dtype=torch.uint8).view(dtype)
    if dtype is E8M0:
        wide, int_view, nan_base, wide_np = codes.float(), torch.int32, 0x7FC00000, np.uint32
    else:
        wide, int_view, nan_base, wide_np = codes.half(), torch.int16, 0x7E00, np.uint16
    bits = wide.view(int_view).numpy().astype(np.int64) & (0xFFFFFFFF if int_view is torch.int32 else 0xFFFF)
    nan = torch.isnan(wide).numpy()
    sign_bit = 0x80000000 if int_view is torch.int32 else 0x8000
    for byte in np.flatnonzero(nan):  # tag each NaN with its byte so the inverse is exact
        bits[byte] = nan_base | int(byte) | (sign_bit if byte & 0x80 else 0)
    up = bits.astype(wide_np)
    assert len(set(up.tolist())) == 256, f"{dtype}: upcast table is not injective"
    return up


def encode(t: torch.Tensor, original: str | None = None) -> tuple[np.ndarray, str]:
    """A CPU tensor -> (numpy array to store, storage kind 'native' | 'upcast' | 'raw').

    bfloat16 comes back as its bits (uint16, 'native'; no pass over the values). ``original``: the
    recorded tensor's dtype name where ``t`` is a float32 copy of it (a bf16 widened to its exact
    float32: stored as that, 'upcast').
    """
    dtype = t.dtype
    if original is not None and dtype is torch.float32:
        return t.numpy(), float32_copy_storage(original)
    if dtype in NATIVE:
        return t.numpy(), "native"
    if dtype is torch.bfloat16:  # its bits, written with HDF5's bfloat16 type
        return bf16_bits(t), "native"
    if dtype in FP8 or dtype is E8M0:
        up = _byte_tables(dtype)
        wide = up[t.view(torch.uint8).numpy()]
        return wide.view(np.float32 if dtype is E8M0 else np.float16), "upcast"
    if dtype is FP4X2:
        return t.view(torch.uint8).numpy(), "raw"
    raise TypeError(f"dtype {dtype_name(dtype)} is not supported by the store")


def bf16_bits(t: torch.Tensor) -> np.ndarray:
    """A CPU bfloat16 tensor's bit patterns as a uint16 numpy view (no copy)."""
    return t.view(torch.int16).numpy().view(np.uint16)


def float32_copy_storage(original: str) -> str:
    """The storage kind of a float32 host copy of a tensor recorded as ``original``: float32 itself
    ('native') or bf16 widened on the device ('upcast', its exact float32)."""
    return "upcast" if original == "bfloat16" else "native"


def decode(array: np.ndarray, dtype_name_: str) -> torch.Tensor:
    """Stored numpy array + original dtype name -> torch tensor, bit-identical to what was encoded."""
    dtype = dtype_from_name(dtype_name_)
    if dtype in NATIVE:
        return torch.from_numpy(np.ascontiguousarray(array).astype(NATIVE[dtype], copy=False))
    if dtype is torch.bfloat16:  # its bits (uint16), or its exact float32 (bits << 16)
        if array.dtype == np.uint16:
            bits = np.ascontiguousarray(array)
        else:
            bits = float32_to_bf16_bits(array)
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    if dtype in FP8 or dtype is E8M0:
        wide_u = np.uint32 if dtype is E8M0 else np.uint16
        bits = np.ascontiguousarray(array).view(wide_u)
        return torch.from_numpy(_bits_to_bytes(dtype, bits)).view(dtype)
    if dtype is FP4X2:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.uint8)).view(FP4X2)
    raise TypeError(f"dtype {dtype_name_} is not supported by the store")


@functools.lru_cache(maxsize=None)
def _sorted_table(dtype: torch.dtype):
    """The upcast table sorted by wide bit pattern: (sorted bits, byte for each)."""
    up = _byte_tables(dtype)
    order = np.argsort(up, kind="stable")
    return up[order], order.astype(np.uint8)


def _bits_to_bytes(dtype: torch.dtype, bits: np.ndarray) -> np.ndarray:
    keys, codes = _sorted_table(dtype)
    pos = np.searchsorted(keys, bits).clip(0, 255)
    if not np.array_equal(keys[pos], bits):
        raise ValueError(f"stored values are not {dtype_name(dtype)} values (file edited?)")
    return codes[pos]

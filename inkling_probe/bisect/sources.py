"""Tensors for ``bisect elements``: from a dump, or from safetensors files read with numpy alone.

Values come back as their raw bit patterns (unsigned integers of the element size) so equality is
bit-exact for every dtype, fp8 and bf16 included. Packed NVFP4 weights (uint8 with a ``*_scale``
sibling) are unpacked to one 4-bit code per element.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from inkling_probe.errors import ProbeError

_ST_DTYPES = {"F64": "u8", "F32": "u4", "F16": "u2", "BF16": "u2", "I64": "u8", "I32": "u4", "I16": "u2",
              "I8": "u1", "U64": "u8", "U32": "u4", "U16": "u2", "U8": "u1", "BOOL": "u1", "F8_E4M3": "u1", "F8_E5M2": "u1", "F8_E8M0": "u1"}


class BadSource(ProbeError):
    """A path that is neither a dump nor safetensors."""


class SafetensorsSource:
    """Every tensor of one ``.safetensors`` file or a folder of them."""

    def __init__(self, path: Path):
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        self.entries: dict[str, tuple[Path, dict, int]] = {}
        for f in files:
            header, start = _header(f)
            for name, meta in header.items():
                self.entries[name] = (f, meta, start)

    def keys(self) -> list[str]:
        return sorted(self.entries)

    def dtype(self, key: str) -> str:
        return self.entries[key][1]["dtype"]

    def bits(self, key: str) -> np.ndarray:
        f, meta, start = self.entries[key]
        a, b = meta["data_offsets"]
        raw = np.memmap(f, dtype=np.uint8, mode="r", offset=start + a, shape=(b - a,)) if b > a \
            else np.zeros(0, np.uint8)
        out = raw.view(np.dtype(_ST_DTYPES[meta["dtype"]]).newbyteorder("<")).reshape(meta["shape"])
        return unpack_fp4(out) if self.packed_fp4(key) else out

    def packed_fp4(self, key: str) -> bool:
        return self.dtype(key) == "U8" and f"{key}_scale" in self.entries


class DumpSource:
    """Every key of a dump (step 0, or ``step``), global view."""

    def __init__(self, path: Path, step: int = 0):
        from inkling_probe.store.reader import open_dump

        self.dump, self.step = open_dump(path), step

    def keys(self) -> list[str]:
        return self.dump.keys()

    def dtype(self, key: str) -> str:
        return self.dump.rows(key, self.step)[0]["dtype"]

    def bits(self, key: str) -> np.ndarray:
        a = np.ascontiguousarray(self.dump.array(key, self.step))
        return unpack_fp4(a) if self.packed_fp4(key) else a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a

    def packed_fp4(self, key: str) -> bool:
        return "fp4" in self.dtype(key) or "float4" in self.dtype(key)

    def token_dim(self, key: str) -> int | None:
        return self.dump.rows(key, self.step)[0].get("token_dim")

    def media(self) -> tuple[list, int] | None:
        """(media spans, fused rows) of the step (docs/MULTIMODAL.md), or None for a text-only dump."""
        from inkling_probe.compare.modality import layout

        got = layout(self.dump, self.step)
        return got if got and got[0] else None


def unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """uint8 [..., n] -> 4-bit codes [..., 2n], the even element from the low nibble."""
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


def open_source(path: str, step: int = 0):
    """A dump folder, a safetensors file, or a folder of safetensors files."""
    p = Path(path)
    if not p.exists():
        raise BadSource(f"{path}: no such file or directory")
    if p.suffix == ".safetensors" or (p.is_dir() and any(p.glob("*.safetensors"))):
        return SafetensorsSource(p)
    try:
        return DumpSource(p, step)
    except ProbeError as e:
        raise BadSource(f"{path}: neither safetensors nor a dump ({e})") from None


def _header(f: Path) -> tuple[dict, int]:
    """Every entry checked against the file (store/safetensors_header.py: regular files only, the
    header bounded before it is read): a damaged file is one line."""
    from inkling_probe.store.safetensors_header import BadSafetensors, read_header

    try:
        return read_header(f)
    except BadSafetensors as e:
        raise BadSource(str(e)) from None

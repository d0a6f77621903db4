"""Editing a safetensors checkpoint in place (numpy only), to plant a corruption for elements tests."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def tensor_bytes(file: Path, name: str, itemsize: int = 1) -> np.memmap:
    """A writable view of one tensor's raw bytes (as uint of ``itemsize``), in its shape."""
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n))[name]
    a, b = meta["data_offsets"]
    shape = tuple(meta["shape"])
    return np.memmap(file, dtype=f"<u{itemsize}", mode="r+", offset=8 + n + a, shape=shape)


def shard_of(ckpt: Path, name: str) -> Path:
    """The safetensors file of a checkpoint dir that holds ``name``."""
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    return ckpt / index["weight_map"][name]

"""What a file holds, told by its first bytes (never by its name): the formats foreign dumps come in.

- ``pt``: torch.save's zip archive (``PK\\x03\\x04`` with a ``data.pkl`` member) or its legacy
  pickle (``\\x80`` protocol byte, or the legacy magic number pickled first);
- ``npz``: a zip archive of ``.npy`` members; ``npy``: ``\\x93NUMPY``;
- ``safetensors``: an 8-byte little-endian header length, then a JSON header starting with ``{``;
- ``hdf5``: our own store (``\\x89HDF``), read by store/dump.py, not here.
"""
from __future__ import annotations

import os
import struct
import zipfile

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
MAX_SAFETENSORS_HEADER = 100 << 20  # as the safetensors library's limit


def sniff(path: str) -> str | None:
    """'pt', 'npz', 'npy', 'safetensors', 'hdf5', or None for anything else (or an empty file)."""
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head.startswith(HDF5_MAGIC):
        return "hdf5"
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.startswith(ZIP_MAGIC):
        return _zip_kind(path)
    if head[:1] == b"\x80" and len(head) >= 2 and 2 <= head[1] <= 5:
        return "pt"  # a pickle: torch's legacy format (loaded with weights_only=True only)
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= MAX_SAFETENSORS_HEADER and head[8:9] == b"{" and n + 8 <= os.path.getsize(path):
            return "safetensors"
    return None


def _zip_kind(path: str) -> str | None:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return "pt"  # a truncated zip: the .pt loader names the damage
    if any(n.endswith("data.pkl") for n in names):
        return "pt"
    if names and all(n.endswith(".npy") for n in names):
        return "npz"
    return None

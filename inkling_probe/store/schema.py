"""The on-disk schema: names and versions shared by the writer and the reader (docs/FORMAT.md)."""
from __future__ import annotations

import re

import h5py
import numpy as np

FORMAT_NAME = "inkling-probe"
SCHEMA_VERSION = 3  # 3: bf16 stored as itself (2 bytes, an HDF5 bfloat16 float type); 2: run id in
# segment names and attributes (bf16 stored as float32); versions 1 and 2 are still read
# rank, segment, run id (absent in version 1 names)
SEGMENT_RE = re.compile(r"^rank(\d{5})-seg(\d{6,})(?:-([0-9a-f]{12}))?\.h5$")
TMP_SUFFIX = ".tmp"
LOCK_RE = re.compile(r"^rank(\d{5})\.lock$")
NO_DIM = -1

_STR = h5py.string_dtype("utf-8")
INDEX_DTYPE = np.dtype([
    ("key", _STR), ("step", "<i8"), ("seq", "<i8"), ("call", "<i4"), ("rank", "<i4"),
    ("shape", _STR), ("dtype", _STR), ("storage", _STR), ("shard", _STR), ("dim", "<i2"),
    ("token_dim", "<i2"), ("token_start", "<i8"), ("numel", "<i8"),
    ("mean", "<f8"), ("rms", "<f8"), ("absmax", "<f8"), ("nan", "<i8"), ("inf", "<i8"),
    ("hash", "S16"), ("dataset", _STR), ("offset", "<i8"), ("meta", _STR), ("ref", _STR),
])
INDEX_FIELDS = INDEX_DTYPE.names
OPTIONAL_FIELDS = ("ref",)  # absent in files written before it: read as "" (docs/FORMAT.md, Versioning)
REQUIRED_FIELDS = tuple(f for f in INDEX_FIELDS if f not in OPTIONAL_FIELDS)
SHARDS = ("replicated", "concat", "partial")


def bf16_file_type() -> h5py.h5t.TypeFloatID:
    """HDF5's description of bfloat16 (as HDF5 2.0's ``H5T_FLOAT_BFLOAT16LE``): 2 bytes, sign bit 15,
    8 exponent bits from bit 7 (bias 127), 7 mantissa bits. HDF5 converts it to float32 exactly,
    so plain h5py reads such a dataset as float32 numbers."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    return t


def is_bf16_type(tid) -> bool:
    """Is this HDF5 datatype bfloat16 as :func:`bf16_file_type` describes it?"""
    return (isinstance(tid, h5py.h5t.TypeFloatID) and tid.get_size() == 2 and tid.get_fields() == (15, 7, 8, 0, 7)
            and tid.get_ebias() == 127 and tid.get_order() == h5py.h5t.ORDER_LE)


def segment_name(rank: int, segment: int, run_id: str) -> str:
    return f"rank{rank:05d}-seg{segment:06d}-{run_id}.h5"


def lock_name(rank: int) -> str:
    return f"rank{rank:05d}.lock"


def parse_segment_name(name: str) -> tuple[int, int, str] | None:
    """(rank, segment, run id or '' for version 1) of a segment or unfinished segment name, else None."""
    m = SEGMENT_RE.match(name.removesuffix(TMP_SUFFIX))
    return (int(m[1]), int(m[2]), m[3] or "") if m else None


def in_segment_order(names) -> list[str]:
    """``names`` sorted so that a rank's segments come in the order written: by rank, then segment
    number as a number (seg1000000 follows seg999999), then the name; other names by name, first."""
    def order(name: str):
        parsed = parse_segment_name(name)
        return (1, parsed[0], parsed[1], name) if parsed else (0, 0, 0, name)
    return sorted(names, key=order)


def dataset_path(step: int, key: str, call: int) -> str:
    """Where a tensor lives: /tensors/<step>/<key>, with '#<call>' for repeated calls in one step."""
    return f"/tensors/{step}/{key}" + (f"#{call}" if call else "")


def pack_path(step: int, kind: str, part: int) -> str:
    """Where small tensors of one step and stored type lie back to back: /packs/<step>/<kind>.<part>
    (``kind``: the stored numpy dtype's name, or 'bfloat16')."""
    return f"/packs/{step}/{kind}.{part}"


def ref_text(key: str, call: int) -> str:
    """The ``ref`` field of a row whose values are those of call ``call`` of ``key`` in the same
    step and rank: 'KEY', or 'KEY#CALL' for a repeated call (keys never hold '#')."""
    return f"{key}#{call}" if call else key


def parse_ref(text: str) -> tuple[str, int]:
    """(key, call) of a ``ref`` field."""
    key, _, call = text.partition("#")
    return key, int(call) if call else 0


def shape_text(shape) -> str:
    """'4x128' for (4, 128); '' for a scalar."""
    return "x".join(str(int(s)) for s in shape)


def parse_shape(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split("x")) if text else ()

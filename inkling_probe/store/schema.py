"""The on-disk schema: names and versions shared by the writer and the reader (docs/FORMAT.md)."""
from __future__ import annotations

import re

import h5py
import numpy as np

FORMAT_NAME = "inkling-probe"
SCHEMA_VERSION = 2  # 2: run id in segment names and attributes (version 1 files still read)
# rank, segment, run id (absent in version 1 names)
SEGMENT_RE = re.compile(r"^rank(\d{5})-seg(\d{6})(?:-([0-9a-f]{12}))?\.h5$")
TMP_SUFFIX = ".tmp"
LOCK_RE = re.compile(r"^rank(\d{5})\.lock$")
NO_DIM = -1

_STR = h5py.string_dtype("utf-8")
INDEX_DTYPE = np.dtype([
    ("key", _STR), ("step", "<i8"), ("seq", "<i8"), ("call", "<i4"), ("rank", "<i4"),
    ("shape", _STR), ("dtype", _STR), ("storage", _STR), ("shard", _STR), ("dim", "<i2"),
    ("token_dim", "<i2"), ("token_start", "<i8"), ("numel", "<i8"),
    ("mean", "<f8"), ("rms", "<f8"), ("absmax", "<f8"), ("nan", "<i8"), ("inf", "<i8"),
    ("hash", "S16"), ("dataset", _STR), ("offset", "<i8"), ("meta", _STR),
])
INDEX_FIELDS = INDEX_DTYPE.names
SHARDS = ("replicated", "concat", "partial")


def segment_name(rank: int, segment: int, run_id: str) -> str:
    return f"rank{rank:05d}-seg{segment:06d}-{run_id}.h5"


def lock_name(rank: int) -> str:
    return f"rank{rank:05d}.lock"


def parse_segment_name(name: str) -> tuple[int, int, str] | None:
    """(rank, segment, run id or '' for version 1) of a segment or unfinished segment name, else None."""
    m = SEGMENT_RE.match(name.removesuffix(TMP_SUFFIX))
    return (int(m[1]), int(m[2]), m[3] or "") if m else None


def dataset_path(step: int, key: str, call: int) -> str:
    """Where a tensor lives: /tensors/<step>/<key>, with '#<call>' for repeated calls in one step."""
    return f"/tensors/{step}/{key}" + (f"#{call}" if call else "")


def pack_path(step: int, storage_dtype, part: int) -> str:
    """Where small tensors of one step and stored dtype lie back to back: /packs/<step>/<dtype>.<part>."""
    return f"/packs/{step}/{storage_dtype.name}.{part}"


def shape_text(shape) -> str:
    """'4x128' for (4, 128); '' for a scalar."""
    return "x".join(str(int(s)) for s in shape)


def parse_shape(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split("x")) if text else ()

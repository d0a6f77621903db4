"""The HDF5 objects of a segment file, made through h5py's low-level calls (each a fraction of the
high-level call's cost): stored types, datasets (allocated, contiguous, compressed), attributes and
the index; a lane (one segment file being written) and its close-and-rename into place.
"""
from __future__ import annotations

import operator
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from inkling_probe.store import schema

@dataclass
class _Lane:
    """One segment file being written: its number, HDF5 file, index rows, groups, bytes placed and
    the file descriptor jobs write through (HDF5's sec2 driver's; asked once, not a write: ~10 us)."""

    number: int
    file: h5py.File
    rows: list
    groups: dict
    bytes: int = 0
    fd: int = field(init=False)

    def __post_init__(self):
        self.fd = self.file.id.get_vfd_handle()


@dataclass
class _Pack:
    """One pack part being filled: its dataset path, buffer and how much of it is used."""

    path: str
    buf: np.ndarray
    ftype: object  # the HDF5 type it is written with
    used: int = 0


@dataclass
class _Arena:
    """A pack part allocated ahead for large tensors (store/arenas.py): its path, lane, the file
    offset of its first byte, its size and how much of it is used (elements)."""

    path: str
    lane: _Lane
    offset: int
    size: int
    used: int = 0


def _close_lane(lane: _Lane, complete_through_step: int) -> None:
    """Write a lane's index and completion mark, close its file and rename it into place."""
    f = lane.file
    _write_index(f, np.array([_INDEX_ROW(row) for row in lane.rows], dtype=schema.INDEX_DTYPE))
    _write_attrs(f.id, {"complete_through_step": complete_through_step})
    tmp = f.filename
    f.close()
    os.replace(tmp, tmp[: -len(schema.TMP_SUFFIX)])


_BF16 = schema.bf16_file_type()


def _is_bf16_bits(row: dict, array: np.ndarray) -> bool:
    return row["dtype"] == "bfloat16" and array.dtype == np.uint16


def _stored_type(row: dict, array: np.ndarray):
    """The HDF5 type a tensor is written with: bfloat16 bits get HDF5's bfloat16 float type, so
    plain tools read numbers; everything else its numpy dtype's type."""
    return _BF16 if _is_bf16_bits(row, array) else _file_type(array.dtype)


def _pack_kind(row: dict, array: np.ndarray) -> str:
    """Which pack a small tensor joins: one per stored type ('bfloat16' apart from real uint16)."""
    if _is_bf16_bits(row, array):
        return "bfloat16"
    name = _DTYPE_NAMES.get(array.dtype)
    if name is None:  # dtype.name costs ~3 us a call
        name = _DTYPE_NAMES[array.dtype] = array.dtype.name
    return name


_DTYPE_NAMES: dict = {}


def _same_pack(first: tuple, row: dict, array: np.ndarray) -> bool:
    """Can the tensor join the part that ``first`` (row, array, stats) starts: same step and stored type?"""
    return first[0]["step"] == row["step"] and _pack_kind(first[0], first[1]) == _pack_kind(row, array)


_INDEX_FIELDS = operator.itemgetter(*schema.REQUIRED_FIELDS)  # (a third of a generator's cost)


def _INDEX_ROW(row: dict) -> tuple:
    """A row dict's index tuple (``ref`` last, "" unless the row is a reference)."""
    return (*_INDEX_FIELDS(row), row.get("ref", ""))
_INDEX_TYPE = h5py.h5t.py_create(schema.INDEX_DTYPE, logical=True)


def _write_index(f: h5py.File, rows: np.ndarray) -> None:
    """The segment's ``/index``: one contiguous compound dataset, through h5py's low-level calls
    (half of ``create_dataset``'s ~2 ms)."""
    dsid = h5py.h5d.create(f.id, b"index", _INDEX_TYPE, h5py.h5s.create_simple((len(rows),)))
    if len(rows):
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, rows)


_TEXT = h5py.h5t.py_create(h5py.string_dtype(), logical=True)
_SCALAR = h5py.h5s.create(h5py.h5s.SCALAR)
_TEXT_VALUES: dict[str, np.ndarray] = {}  # attribute text -> its array, made once (a few kinds)
_FILE_TYPES: dict[np.dtype, h5py.h5t.TypeID] = {}
_ALLOCATED_DCPL = None


def _file_type(dtype: np.dtype):
    """The HDF5 type of a numpy dtype, made once per dtype (a third of a dataset's create cost)."""
    t = _FILE_TYPES.get(dtype)
    if t is None:
        t = _FILE_TYPES[dtype] = h5py.h5t.py_create(dtype)
    return t


def _allocated_dcpl():
    """Contiguous, space allocated at creation, never filled by HDF5: one property list for all."""
    global _ALLOCATED_DCPL
    if _ALLOCATED_DCPL is None:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        _ALLOCATED_DCPL = dcpl
    return _ALLOCATED_DCPL


def _set_text_attrs(dsid, attrs: dict) -> None:
    """String attributes on a dataset, for plain-tool readers where the stored type is not the
    original (bf16, fp8, fp4): ``dtype`` and ``storage``. Everything else about a tensor is in the
    index. h5py's low-level calls: a quarter of ``Dataset.attrs`` cost (~0.05 ms against ~0.2)."""
    for name, text in attrs.items():
        value = _TEXT_VALUES.get(text)
        if value is None:
            value = _TEXT_VALUES.setdefault(text, np.array(text.encode(), dtype=h5py.string_dtype()))
        h5py.h5a.create(dsid, name.encode(), _TEXT, _SCALAR).write(value)


_INT64 = h5py.h5t.py_create(np.dtype(np.int64))
_FLOAT64 = h5py.h5t.py_create(np.dtype(np.float64))


def _write_attrs(oid, attrs: dict) -> None:
    """Scalar attributes of a segment's root, as ``attrs.update`` writes them (str: variable-length
    UTF-8; int: int64; float: float64), through h5py's low-level calls: half the cost a segment."""
    for name, value in attrs.items():
        if isinstance(value, str):
            tid, data = _TEXT, np.array(value.encode(), dtype=h5py.string_dtype())
        elif isinstance(value, float):
            tid, data = _FLOAT64, np.array(value, dtype=np.float64)
        else:
            tid, data = _INT64, np.array(value, dtype=np.int64)
        h5py.h5a.create(oid, name.encode(), tid, _SCALAR).write(data)



def _create_allocated(group: h5py.Group, name: str, array: np.ndarray, ftype):
    """A contiguous dataset of HDF5 type ``ftype`` (``array``'s bytes as they are) whose file space
    is allocated now and never filled by HDF5: (low-level DatasetID, file offset of its bytes); the
    caller writes the bytes there. Empty or scalar datasets are written at once (offset None)."""
    if array.ndim == 0 or array.size == 0:
        return _create_contiguous(group, name, array, ftype), None
    dsid = h5py.h5d.create(group.id, name.encode(), ftype, h5py.h5s.create_simple(array.shape),
                           dcpl=_allocated_dcpl())
    return dsid, dsid.get_offset()


def _create_contiguous(group: h5py.Group, name: str, array: np.ndarray, ftype):
    """h5py's low-level create + write: half the cost of ``create_dataset`` for small tensors.
    ``array``'s bytes are written as they are, as HDF5 type ``ftype``. Returns the DatasetID."""
    array = np.ascontiguousarray(array)
    space = h5py.h5s.create_simple(array.shape) if array.ndim else h5py.h5s.create(h5py.h5s.SCALAR)
    dsid = h5py.h5d.create(group.id, name.encode(), ftype, space)
    if array.size:
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, array, mtype=ftype)
    return dsid  # a DatasetID: wrapping it in h5py.Dataset costs ~0.3 ms, done only for attributes


def _create_compressed(group: h5py.Group, name: str, array: np.ndarray, ftype):
    """A chunked dataset through stock HDF5 filters (shuffle + deflate level 1), written at once."""
    array = np.ascontiguousarray(array)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(h5py.filters.guess_chunk(array.shape, None, array.dtype.itemsize))
    dcpl.set_shuffle()
    dcpl.set_deflate(1)
    dsid = h5py.h5d.create(group.id, name.encode(), ftype, h5py.h5s.create_simple(array.shape), dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, array, mtype=ftype)
    return dsid

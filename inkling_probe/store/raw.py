"""Reading a plain contiguous HDF5 dataset's bytes straight from the file, without the GIL.

h5py holds the GIL for the whole of a read, so a thread reading ahead would stall the thread
computing. A dataset stored contiguously, unfiltered, with a plain little-endian number type (what
the writer stores every tensor of its own as, compression off) is a run of bytes at one offset of
the file: ``os.preadv`` reads it into a numpy buffer and releases the GIL meanwhile. bfloat16
(schema 3) comes as its exact float32, as segments.read_values gives it. Anything else (chunked,
compressed, an enum, a big-endian or exotic type, storage not yet allocated) has no plan: h5py reads it.
:func:`read_into` reads a range of the values into a caller's buffer (compare/stream.py reads a pair
chunk by chunk into the :func:`scratch` buffers, reused from key to key).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import h5py
import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.segments import safe_dataset
from inkling_probe.store.stats import bf16_bits_to_float32

MIN_BYTES = 1 << 16  # below this, h5py's own read costs less than the checks


@dataclass(frozen=True)
class Plan:
    offset: int
    dtype: np.dtype  # what the bytes are (uint16 for bfloat16)
    shape: tuple
    bf16: bool


def plan(ds: h5py.Dataset) -> Plan | None:
    """Where ``ds``'s bytes lie in its file, or None when h5py must read it."""
    dsid = ds.id
    if ds.shape is None or dsid.get_create_plist().get_layout() != h5py.h5d.CONTIGUOUS:
        return None
    tid = dsid.get_type()
    bf16 = schema.is_bf16_type(tid)
    if bf16:
        dtype = np.dtype("<u2")
    else:
        dtype = ds.dtype
        if dtype.kind not in "iuf" or not dtype.isnative or dtype.byteorder == ">" or \
                tid.get_class() not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT) or not tid.equal(h5py.h5t.py_create(dtype)):
            return None
    nbytes = int(np.prod(ds.shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < MIN_BYTES or dsid.get_storage_size() != nbytes:
        return None
    offset = dsid.get_offset()
    return None if offset is None else Plan(int(offset), dtype, tuple(ds.shape), bf16)


def read(fd: int, p: Plan, what: str) -> np.ndarray:
    """The values (``what`` names the dataset in an error): a file shorter than the dataset is a
    DumpError, never a partly filled array."""
    out = np.empty(p.shape, dtype=p.dtype)
    _check_size(fd, p, what)
    _fill(fd, out.reshape(-1), p.offset, what)
    return bf16_bits_to_float32(out) if p.bf16 else out


def numel(p: Plan) -> int:
    return int(np.prod(p.shape, dtype=np.int64))


def read_into(fd: int, p: Plan, start: int, out: np.ndarray, what: str) -> np.ndarray:
    """Values ``[start, start + out.size)`` of the flat dataset read into ``out`` (flat, of the stored
    type ``p.dtype``: bfloat16 stays its uint16 bits); returns ``out``. A read past the dataset's end
    is a ValueError, a file that ends before it a DumpError."""
    if start < 0 or start + out.size > numel(p) or out.dtype != p.dtype:
        raise ValueError(f"{what}: values {start}:{start + out.size} of {numel(p)} ({p.dtype}) into {out.dtype}")
    _fill(fd, out, p.offset + start * p.dtype.itemsize, what)
    return out


def fits(fd: int, p: Plan) -> bool:
    """The file holds the whole dataset (not truncated)."""
    return p.offset + numel(p) * p.dtype.itemsize <= os.fstat(fd).st_size


def _check_size(fd: int, p: Plan, what: str) -> None:
    if not fits(fd, p):
        raise DumpError(f"{what} lies past the end of the file (truncated?)")


def _fill(fd: int, out: np.ndarray, offset: int, what: str) -> None:
    view = memoryview(out.view(np.uint8))
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise DumpError(f"{what}: the file ended while reading it (truncated?)")
        done += got


_LOCAL = threading.local()


def scratch(slot: int, dtype, n: int) -> np.ndarray:
    """This thread's read buffer number ``slot``: ``n`` values of ``dtype``, the same memory from
    call to call (grown when too small), so chunked reads of key after key land in a buffer that is
    already mapped and in cache. The values live until the next call with the same slot."""
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    dtype = np.dtype(dtype)
    need = n * dtype.itemsize
    b = bufs.get(slot)
    if b is None or b.size < need:
        b = bufs[slot] = np.empty(need, dtype=np.uint8)
    return b[:need].view(dtype)


def plain(dump, row: dict) -> tuple[int, Plan] | None:
    """A file descriptor (the caller's to close) and the plan of ``row``'s own dataset in one of
    ``dump``'s segments (a Dump of this package: one dataset, no pack, no merged rows), when it is
    plain contiguous with the values its index row says; else None (read it with ``dump.array``)."""
    if row.get("offset", -1) >= 0 or not row.get("dataset") or "_parts" in row:
        return None
    with dump._lock:
        try:
            f = dump._file(row["_segment"])
            p = plan(safe_dataset(f, row["dataset"]))
        except Exception:  # damaged or unopenable: the ordinary read says what is wrong
            return None
        if p is None or numel(p) != row["numel"] or not fits(f.id.get_vfd_handle(), p):
            return None
        return os.dup(f.id.get_vfd_handle()), p

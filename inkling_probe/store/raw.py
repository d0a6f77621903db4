"""Reading a plain contiguous HDF5 dataset's bytes straight from the file, without the GIL.

h5py holds the GIL for the whole of a read, so a thread reading ahead would stall the thread
computing. A dataset stored contiguously, unfiltered, with a plain little-endian number type (what
the writer stores every tensor of its own as, compression off) is a run of bytes at one offset of
the file: ``os.preadv`` reads it into a numpy buffer and releases the GIL meanwhile. bfloat16
(schema 3) comes as its exact float32, as segments.read_values gives it. Anything else (chunked,
compressed, an enum, a big-endian or exotic type, storage not yet allocated) has no plan: h5py reads it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import h5py
import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
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
    view = memoryview(out.reshape(-1).view(np.uint8))
    if p.offset + len(view) > os.fstat(fd).st_size:
        raise DumpError(f"{what} lies past the end of the file (truncated?)")
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], p.offset + done)
        if got <= 0:
            raise DumpError(f"{what}: the file ended while reading it (truncated?)")
        done += got
    return bf16_bits_to_float32(out) if p.bf16 else out

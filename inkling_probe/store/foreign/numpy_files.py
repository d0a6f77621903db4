"""``.npy`` and ``.npz`` files read as untrusted input: headers first, data only when asked for.

A ``.npy`` is a magic string, a header (dtype, order, shape) and the data; the data the header
declares must fit the file. An ``.npz`` is a zip of ``.npy`` members: listing reads the zip's
central directory and each member's ``.npy`` header (a few hundred bytes decompressed), never a
member's data, so listing a 1 MB ``.npz`` of zeros costs kilobytes, not the 1.1 GB it inflates to.
A member's size in the directory must be its header plus the data it declares; a name given twice
is refused (one would be dropped); and what the members inflate to is bounded by the file's size
(limits.py). Only numeric dtypes are read (never a pickle: ``allow_pickle=False``).
"""
from __future__ import annotations

import math
import os
import zipfile

import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store.foreign.limits import check_reads_as

_HEADER_READ = 1 << 16  # enough for any header numpy writes (they are padded to 64 bytes)


def dtype_name(path: str, dtype: np.dtype) -> str:
    """torch's name of a numeric numpy dtype; anything else is refused."""
    if dtype.hasobject:
        raise DumpError(f"{path}: holds Python objects (a pickle); refused: only numeric arrays are read")
    if dtype.kind not in "biuf" or dtype.byteorder == ">" or dtype.fields is not None:
        raise DumpError(f"{path}: dtype {dtype} is not a tensor dtype the store reads")
    return "bool" if dtype.kind == "b" else dtype.name


def read_header(fh, where: str) -> tuple[tuple, bool, np.dtype, int]:
    """(shape, fortran order, dtype, data bytes declared) of the ``.npy`` stream at ``fh``."""
    fmt = np.lib.format
    version = fmt.read_magic(fh)
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, fortran, dtype = read(fh, max_header_size=_HEADER_READ)
    dtype_name(where, dtype)
    return tuple(shape), fortran, dtype, math.prod(shape) * dtype.itemsize


# -- .npy ---------------------------------------------------------------------------------------------
def describe_npy(path: str) -> list[tuple[str, tuple, str]]:
    """[("", shape, dtype name)]: the header alone, its data checked to fit the file."""
    with open(path, "rb") as fh:
        shape, _, dtype, nbytes = read_header(fh, path)
        left = os.fstat(fh.fileno()).st_size - fh.tell()
    if nbytes > left:
        raise DumpError(f"{path}: its header declares {list(shape)} {dtype} ({nbytes} bytes), the file holds "
                        f"{left} after it; the file lies about its size")
    return [("", shape, dtype_name(path, dtype))]


def load_npy(path: str) -> np.ndarray:
    describe_npy(path)
    with open(path, "rb") as fh:
        shape, fortran, dtype, _ = read_header(fh, path)
        return _read_data(fh, shape, fortran, dtype, path)


# -- .npz ---------------------------------------------------------------------------------------------
def describe_npz(path: str) -> list[tuple[str, tuple, str]]:
    """[(name, shape, dtype name)] of every member, from the central directory and member headers."""
    size = os.path.getsize(path)
    out, total = [], 0
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        names = [_member_name(path, i.filename) for i in infos]
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise DumpError(f"{path}: array {twice!r} appears twice in the archive; refused: one would be dropped")
        for name, info in zip(names, infos):
            shape, dtype, nbytes = _member_header(path, z, info)
            total += nbytes
            out.append((name, shape, dtype_name(path, dtype)))
    check_reads_as(path, size, total, "its arrays")
    return out


def load_npz(path: str, name: str) -> np.ndarray:
    """One member's array: its header checked again (not the whole archive's: one read per member)."""
    where = f"{path}: {name!r}"
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name + ".npy")
        _, _, nbytes = _member_header(path, z, info)
        check_reads_as(path, os.path.getsize(path), nbytes, f"array {name!r}")
        with z.open(info) as fh:
            shape, fortran, dtype, _ = read_header(fh, where)
            return _read_data(fh, shape, fortran, dtype, where)


def _member_name(path: str, filename: str) -> str:
    if not filename.endswith(".npy"):
        raise DumpError(f"{path}: member {filename[:80]!r} is not a .npy array")
    return filename[: -len(".npy")]


def _member_header(path: str, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, np.dtype, int]:
    """A member's header (only its first bytes decompressed), its declared data checked against the
    member's size in the central directory."""
    where = f"{path}: {info.filename[:80]!r}"
    with z.open(info) as fh:
        shape, _, dtype, nbytes = read_header(fh, where)
        header_bytes = fh.tell()
    if header_bytes + nbytes != info.file_size:
        raise DumpError(f"{where} declares {list(shape)} {dtype} ({nbytes} bytes after a {header_bytes}-byte "
                        f"header), the archive says the member holds {info.file_size}; the file lies")
    return shape, dtype, nbytes


def _read_data(fh, shape: tuple, fortran: bool, dtype: np.dtype, where: str) -> np.ndarray:
    """Exactly the declared bytes (a short read is an error), in chunks: memory is the array itself."""
    count = math.prod(shape)
    array = np.empty(count, dtype)
    view = memoryview(array.view(np.uint8).reshape(-1))
    done = 0
    while done < len(view):
        n = fh.readinto(view[done: done + (16 << 20)])
        if not n:
            raise DumpError(f"{where}: its data ends after {done} of {len(view)} bytes")
        done += n
    if fortran:
        return array.reshape(shape[::-1]).transpose()
    return array.reshape(shape)

"""Writes one rank's dump as segment files that are complete the moment they appear.

A segment is written as ``<name>.tmp``, closed, and renamed into place, so a process killed at any
point leaves only whole segment files (and perhaps one ``.tmp`` the reader ignores). A segment ends
at every step boundary and when it passes the size limit, so every completed step survives.

Tensors under the pack threshold are appended to flat arrays of one step and stored dtype
(``/packs/<step>/<dtype>.<part>``, 1 MiB each, offsets in the index), written as each part fills:
creating an HDF5 dataset costs ~0.15 ms on this class of machine, more than everything else a small
tensor needs.

This module imports numpy and h5py only: it runs inside the writer process (writer_process.py).
"""
from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

import h5py
import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.stats import NAN_STATS, array_stats, content_hash

_GZIP_MIN_BYTES = 1 << 20
_PACK_PART_BYTES = 1 << 20


@dataclass
class _Pack:
    """One pack part being filled: its dataset path, buffer and how much of it is used."""

    path: str
    buf: np.ndarray
    used: int = 0


class SegmentWriter:
    """Appends tensors and index rows for one rank; call :meth:`end_segment` at step ends."""

    def __init__(self, path, rank: int, world_size: int, *, run_id: str, run_meta: str = "{}",
                 segment_mb: float = 1024, compress: str = "none", pack_kb: float = 256):
        self.dir = os.fspath(path)
        self.rank, self.world_size, self.run_id = rank, world_size, run_id
        self.run_meta = run_meta
        self.segment_bytes = int(segment_mb * (1 << 20))
        self.compress = compress
        self.pack_bytes = int(pack_kb * 1024)
        self._segment = 0
        self._file = None
        self._rows: list[tuple] = []
        self._bytes = 0
        self._packs: dict[tuple, _Pack] = {}
        self._pack_parts: dict[tuple, int] = {}

    def _open_segment(self) -> h5py.File:
        name = schema.segment_name(self.rank, self._segment, self.run_id)
        path = os.path.join(self.dir, name + schema.TMP_SUFFIX)
        if os.path.lexists(path):
            raise DumpError(f"{path}: already exists (planted in the dump folder?); not written through")
        # "x": exclusive create (O_EXCL), so a file or a symbolic link planted there is never written through
        f = h5py.File(path, "x", libver="latest")
        f.attrs.update({
            "format": schema.FORMAT_NAME, "schema_version": schema.SCHEMA_VERSION, "run_id": self.run_id,
            "rank": self.rank, "world_size": self.world_size, "segment": self._segment,
            "created": time.time(), "run": self.run_meta,
        })
        self._file, self._rows, self._bytes, self._packs, self._pack_parts = f, [], 0, {}, {}
        self._groups = {}
        return f

    def add(self, row: dict, array: np.ndarray, *, stats: bool = True, store: bool = True) -> None:
        """Add one tensor: fill in its hash (and stats), store it (own dataset or a pack), index it.

        Any failure (disk full, file size limit, ...) is a one-line :class:`DumpError` naming the key.
        """
        try:
            self._add(row, array, stats, store)
        except Exception as e:
            raise DumpError(f"recording {row['key']!r} (step {row['step']}) in {self.dir}: {why(e)}") from None

    def _add(self, row: dict, array: np.ndarray, stats: bool, store: bool) -> None:
        if self._file is not None and self._bytes >= self.segment_bytes:
            self.end_segment(complete_through_step=row["step"] - 1)
        f = self._file or self._open_segment()
        row["hash"] = content_hash(array, row["dtype"], array.shape).encode()
        row.update(array_stats(array, row["storage"]) if stats else {**NAN_STATS, "nan": -1, "inf": -1})
        row["dataset"], row["offset"] = "", -1
        if store and array.nbytes < self.pack_bytes:
            self._append_to_pack(row, array)
        elif store:
            self._write_dataset(f, row, array)
        self._rows.append(tuple(row[k] for k in schema.INDEX_FIELDS))

    def _write_dataset(self, f: h5py.File, row: dict, array: np.ndarray) -> None:
        row["dataset"] = schema.dataset_path(row["step"], row["key"], row["call"])
        group_name, name = row["dataset"].rsplit("/", 1)
        group = self._group(group_name)
        if self.compress == "gzip" and array.nbytes >= _GZIP_MIN_BYTES:
            ds = group.create_dataset(name, data=array, compression="gzip", compression_opts=1,
                                      shuffle=True, chunks=True).id
        else:
            ds = _create_contiguous(group, name, array)
        attrs = _plain_tool_attrs(row)
        if attrs:
            h5py.Dataset(ds).attrs.update(attrs)
        self._bytes += array.nbytes

    def _append_to_pack(self, row: dict, array: np.ndarray) -> None:
        """Copy a small tensor into its step's pack; full packs go to the file at once.

        A pack part is written as soon as it holds ``_PACK_PART_BYTES``, so a step's data is written
        while the step runs, not all at its end.
        """
        key = (row["step"], array.dtype.str)
        pack = self._packs.get(key)
        if pack is None or pack.used + array.size > pack.buf.size:
            if pack is not None:
                self._write_pack(pack)
            part = self._pack_parts.get(key, 0)
            self._pack_parts[key] = part + 1
            size = max(_PACK_PART_BYTES // array.dtype.itemsize, array.size)
            pack = self._packs[key] = _Pack(schema.pack_path(row["step"], array.dtype, part),
                                            np.empty(size, dtype=array.dtype))
        pack.buf[pack.used: pack.used + array.size] = array.reshape(-1)
        row["dataset"], row["offset"] = pack.path, pack.used
        pack.used += array.size
        self._bytes += array.nbytes

    def _write_pack(self, pack: "_Pack") -> None:
        group_name, name = pack.path.rsplit("/", 1)
        _create_contiguous(self._group(group_name), name, pack.buf[: pack.used])

    def _group(self, name: str) -> h5py.Group:
        """A group of the open segment, created once (``require_group`` costs ~1 ms a call)."""
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = self._file.require_group(name)
        return group

    def _write_packs(self) -> None:
        for pack in self._packs.values():
            self._write_pack(pack)
        self._packs = {}

    def end_segment(self, complete_through_step: int) -> None:
        """Write packs and index, close the file and rename it into place (no-op if none is open)."""
        f = self._file
        if f is None:
            return
        try:
            self._finish(f, complete_through_step)
        except Exception as e:
            self.abort()
            raise DumpError(f"ending segment {self._segment} of rank {self.rank} in {self.dir}: {why(e)}") from None

    def abort(self) -> None:
        """After a failure: close what is open without raising; its ``.tmp`` file stays (ignored)."""
        f, self._file, self._packs = self._file, None, {}
        if f is not None:
            try:
                f.close()
            except Exception:
                pass

    def detach_after_fork(self) -> None:
        """In a forked child: point the inherited HDF5 file at /dev/null, so nothing the child's HDF5
        library flushes (at its exit) reaches the parent's segment."""
        if self._file is not None:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._file.id.get_vfd_handle())
            finally:
                os.close(null)
        self._file = None

    def _finish(self, f: h5py.File, complete_through_step: int) -> None:
        self._write_packs()
        f.create_dataset("index", data=np.array(self._rows, dtype=schema.INDEX_DTYPE), maxshape=(None,))
        f.attrs["complete_through_step"] = complete_through_step
        tmp = f.filename
        f.close()
        os.replace(tmp, tmp[: -len(schema.TMP_SUFFIX)])
        self._file = None
        self._segment += 1

    def close(self, complete_through_step: int) -> None:
        self.end_segment(complete_through_step)


def why(e: BaseException) -> str:
    """A one-line reason for a write failure, naming a full disk or a file size limit plainly."""
    text = str(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "errno = 28" in text or "No space left" in text:
        return "no space left on the device (disk full)"
    if getattr(e, "errno", None) == errno.EFBIG or "errno = 27" in text or "File too large" in text:
        return "file too large (a file size limit, RLIMIT_FSIZE, was reached)"
    first = text.splitlines()[0] if text else type(e).__name__
    return first[:200]


def _plain_tool_attrs(row: dict) -> dict:
    """Attributes for plain-tool readers where the stored type is not the original (bf16, fp8, fp4).

    Everything else about a tensor is in the index; per-dataset attributes cost ~0.1 ms each.
    """
    attrs = {"dtype": row["dtype"], "storage": row["storage"]} if row["storage"] != "native" else {}
    if row["meta"]:
        attrs["meta"] = row["meta"]
    return attrs


def _create_contiguous(group: h5py.Group, name: str, array: np.ndarray):
    """h5py's low-level create + write: half the cost of ``create_dataset`` for small tensors.
    Returns the low-level DatasetID."""
    array = np.ascontiguousarray(array)
    space = h5py.h5s.create_simple(array.shape) if array.ndim else h5py.h5s.create(h5py.h5s.SCALAR)
    dsid = h5py.h5d.create(group.id, name.encode(), h5py.h5t.py_create(array.dtype), space)
    if array.size:
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, array)
    return dsid  # a DatasetID: wrapping it in h5py.Dataset costs ~0.3 ms, done only for attributes

"""Writes one rank's dump as segment files that are complete the moment they appear.

A segment is written as ``<name>.tmp``, closed, and renamed into place, so a process killed at any
point leaves only whole segment files (and perhaps one ``.tmp`` the reader ignores). A segment ends
at every step boundary and when it passes the size limit, so every completed step survives.

Tensors under the pack threshold are appended to flat arrays of one step and stored dtype
(``/packs/<step>/<dtype>.<part>``, 1 MiB each, offsets in the index), written as each part fills:
creating an HDF5 dataset costs ~0.15 ms on this class of machine, more than everything else a small
tensor needs.

A tensor with a dataset of its own is written in two parts: the HDF5 file gets the dataset with its
space allocated at once (``_create_allocated``), and a job computes the hash and statistics and
``pwrite``s the bytes to that space. Jobs run on a few threads where the machine has cores to spare
(:func:`default_workers`); hashing, numpy reductions and ``pwrite`` release the GIL, so one step's
large tensors are summarised and written in parallel. HDF5 itself is called from one thread only.
Before the segment is closed (or abandoned), every job has finished: no write outlives its file.

This module imports numpy and h5py only: it runs inside the writer process (writer_process.py).
"""
from __future__ import annotations

import errno
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import h5py
import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.batch import Countdown, add_each
from inkling_probe.store.stats import NAN_STATS, array_stats, content_hash

_GZIP_MIN_BYTES = 1 << 20
_PACK_PART_BYTES = 1 << 20
_MAX_WORKERS = 4
_SPLIT_BYTES = 4 << 20  # a tensor this large is hashed and written by two job threads at once (the
# logits, last in a forward, are most of a step's tail: ~1.3 ms of hashing off it per 16 MB)


def default_workers() -> int:
    """Job threads for this process: none on one or two cores (the model needs them), else up to 4."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(_MAX_WORKERS, cores - 2))


@dataclass
class _Pack:
    """One pack part being filled: its dataset path, buffer and how much of it is used."""

    path: str
    buf: np.ndarray
    ftype: object  # the HDF5 type it is written with
    used: int = 0


class SegmentWriter:
    """Appends tensors and index rows for one rank; call :meth:`end_segment` at step ends."""

    def __init__(self, path, rank: int, world_size: int, *, run_id: str, run_meta: str = "{}",
                 segment_mb: float = 1024, compress: str = "none", pack_kb: float = 256,
                 workers: int | None = None):
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
        self._jobs = _Jobs(default_workers() if workers is None else workers)

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

    def add(self, row: dict, array: np.ndarray, *, stats: bool | dict = True, store: bool = True,
            on_stored=None) -> None:
        """Add one tensor: fill in its hash (and stats), store it (own dataset or a pack), index it.

        ``stats``: compute them (True), take them as given (a dict of ``stats.STAT_FIELDS``), or none.
        ``array`` must stay unchanged until ``on_stored()`` is called (at once, or from a job thread
        once its bytes are in the file); without ``on_stored`` it is copied first if a job takes it.
        Any failure (disk full, file size limit, ...) is a one-line :class:`DumpError` naming the key,
        raised here or, for a job's failure, by a later call.
        """
        try:
            self._jobs.check()
            self._add(row, array, stats, store, on_stored)
        except DumpError:
            raise
        except Exception as e:
            raise DumpError(_failed(row, self.dir, e)) from None

    def add_batch(self, rows: list, flat: np.ndarray, spans: list, sums: np.ndarray | None = None, *,
                  stats: bool = True, store: bool = True, on_stored=None) -> None:
        """Add the tensors of a batch (store/batch.py): ``flat`` holds them end to end at ``spans``
        ((offset, numel, shape) each); ``sums`` ([k, 5], or None) are their statistics' sums.
        ``on_stored()`` once every one is stored, also after a failure part-way (then once the tensors
        already handed to jobs are written); ``flat`` must stay unchanged until then."""
        add_each(self.add, rows, flat, spans, sums, stats, store, on_stored)

    def _add(self, row: dict, array: np.ndarray, stats: bool, store: bool, on_stored) -> None:
        if self._file is not None and self._bytes >= self.segment_bytes:
            self.end_segment(complete_through_step=row["step"] - 1)
        f = self._file or self._open_segment()
        row["dataset"], row["offset"] = "", -1
        if store and array.nbytes >= self.pack_bytes:
            offset = self._create_dataset(f, row, array)
            if offset is not None:  # the hash, stats and bytes are a job's
                if on_stored is None and self._jobs.workers:
                    array = array.copy()  # the caller may reuse its buffer once add() returns
                self._jobs.submit(row, array, self._vfd(), offset, stats, self.dir, on_stored)
                self._rows.append(row)
                return
        _summarise(row, array, stats)
        if store and array.nbytes < self.pack_bytes:
            self._append_to_pack(row, array)
        self._rows.append(row)
        if on_stored is not None:
            on_stored()

    def _create_dataset(self, f: h5py.File, row: dict, array: np.ndarray) -> int | None:
        """The tensor's own dataset; returns the file offset its bytes go to, or None once written
        (compressed data goes through HDF5's filters)."""
        row["dataset"] = schema.dataset_path(row["step"], row["key"], row["call"])
        group_name, name = row["dataset"].rsplit("/", 1)
        group = self._group(group_name)
        offset = None
        ftype = _stored_type(row, array)
        if self.compress == "gzip" and array.nbytes >= _GZIP_MIN_BYTES:
            ds = _create_compressed(group, name, array, ftype)
        else:
            ds, offset = _create_allocated(group, name, array, ftype)
        if row["storage"] != "native":
            _set_text_attrs(ds, {"dtype": row["dtype"], "storage": row["storage"]})
        self._bytes += array.nbytes
        return offset

    def _vfd(self) -> int:
        """The open segment's file descriptor (HDF5's sec2 driver): jobs write at offsets through it."""
        return self._file.id.get_vfd_handle()

    def _append_to_pack(self, row: dict, array: np.ndarray) -> None:
        """Copy a small tensor into its step's pack; full packs go to the file at once.

        A pack part is written as soon as it holds ``_PACK_PART_BYTES``, so a step's data is written
        while the step runs, not all at its end.
        """
        kind = _pack_kind(row, array)
        key = (row["step"], kind)
        pack = self._packs.get(key)
        if pack is None or pack.used + array.size > pack.buf.size:
            if pack is not None:
                self._write_pack(pack)
            part = self._pack_parts.get(key, 0)
            self._pack_parts[key] = part + 1
            size = max(_PACK_PART_BYTES // array.dtype.itemsize, array.size)
            pack = self._packs[key] = _Pack(schema.pack_path(row["step"], kind, part),
                                            np.empty(size, dtype=array.dtype), _stored_type(row, array))
        pack.buf[pack.used: pack.used + array.size] = array.reshape(-1)
        row["dataset"], row["offset"] = pack.path, pack.used
        pack.used += array.size
        self._bytes += array.nbytes

    def _write_pack(self, pack: "_Pack") -> None:
        group_name, name = pack.path.rsplit("/", 1)
        _create_contiguous(self._group(group_name), name, pack.buf[: pack.used], pack.ftype)

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
            self._jobs.check()
            return
        try:
            self._jobs.wait()  # every job's bytes are in the file, or its failure is raised
        except DumpError:
            self.abort()
            raise  # names the tensor whose write failed
        try:
            self._finish(f, complete_through_step)
        except Exception as e:
            self.abort()
            raise DumpError(f"ending segment {self._segment} of rank {self.rank} in {self.dir}: {why(e)}") from None

    def abort(self) -> None:
        """After a failure: close what is open without raising; its ``.tmp`` file stays (ignored)."""
        self._jobs.wait(raise_error=False)  # no job may write through the descriptor once closed
        f, self._file, self._packs = self._file, None, {}
        if f is not None:
            try:
                f.close()
            except Exception:
                pass

    def detach_after_fork(self) -> None:
        """In a forked child: point the inherited HDF5 file at an unlinked scratch file, so nothing the
        child's HDF5 library flushes or truncates (at its exit) reaches the parent's segment."""
        self._jobs = _Jobs(0)  # the job threads did not survive the fork
        if self._file is not None:
            with tempfile.TemporaryFile() as scratch:
                os.dup2(scratch.fileno(), self._file.id.get_vfd_handle())
        self._file = None

    def _finish(self, f: h5py.File, complete_through_step: int) -> None:
        self._write_packs()
        rows = [tuple(row[k] for k in schema.INDEX_FIELDS) for row in self._rows]
        f.create_dataset("index", data=np.array(rows, dtype=schema.INDEX_DTYPE), maxshape=(None,))
        f.attrs["complete_through_step"] = complete_through_step
        tmp = f.filename
        f.close()
        os.replace(tmp, tmp[: -len(schema.TMP_SUFFIX)])
        self._file = None
        self._segment += 1

    def close(self, complete_through_step: int) -> None:
        try:
            self.end_segment(complete_through_step)
        finally:
            self._jobs.shutdown()


def why(e: BaseException) -> str:
    """A one-line reason for a write failure, naming a full disk or a file size limit plainly."""
    text = str(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "errno = 28" in text or "No space left" in text:
        return "no space left on the device (disk full)"
    if getattr(e, "errno", None) == errno.EFBIG or "errno = 27" in text or "File too large" in text:
        return "file too large (a file size limit, RLIMIT_FSIZE, was reached)"
    first = text.splitlines()[0] if text else type(e).__name__
    return first[:200]


_BF16 = schema.bf16_file_type()


def _is_bf16_bits(row: dict, array: np.ndarray) -> bool:
    return row["dtype"] == "bfloat16" and array.dtype == np.uint16


def _stored_type(row: dict, array: np.ndarray):
    """The HDF5 type a tensor is written with: bfloat16 bits get HDF5's bfloat16 float type, so
    plain tools read numbers; everything else its numpy dtype's type."""
    return _BF16 if _is_bf16_bits(row, array) else _file_type(array.dtype)


def _pack_kind(row: dict, array: np.ndarray) -> str:
    """Which pack a small tensor joins: one per stored type ('bfloat16' apart from real uint16)."""
    return "bfloat16" if _is_bf16_bits(row, array) else array.dtype.name


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


def _failed(row: dict, folder: str, e: BaseException) -> str:
    return f"recording {row['key']!r} (step {row['step']}) in {folder}: {why(e)}"


def _summarise(row: dict, array: np.ndarray, stats) -> None:
    """Fill in the row's content hash and statistics: computed (``stats`` True), given (a dict,
    computed on the GPU), or none (False: NaN and -1 counts)."""
    row["hash"] = content_hash(array, row["dtype"], array.shape).encode()
    if isinstance(stats, dict):
        row.update(stats)
    else:
        row.update(array_stats(array, row["storage"], row["dtype"]) if stats
                   else {**NAN_STATS, "nan": -1, "inf": -1})


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


_FALLOCATE = [None]  # libc's fallocate, found once; False where there is none or it is not supported


def _reserve_blocks(fd: int, offset: int, nbytes: int) -> None:
    """Allocate a dataset's blocks before its ``pwrite`` (Linux ``fallocate``): a buffered write
    into allocated blocks skips block allocation (16 MB into a new file: 4.5-6.7 ms -> 3.3-3.5 ms
    on an H200 host's /tmp, 5.4 -> 3.4 ms on ext4 here), and a full disk fails here, before any
    byte is written. Where the file system has no ``fallocate`` (EOPNOTSUPP) this is skipped from
    then on; glibc's ``posix_fallocate`` is not used: it would emulate it by writing zeros."""
    import ctypes

    call = _FALLOCATE[0]
    if call is None:
        try:
            call = ctypes.CDLL(None, use_errno=True).fallocate  # the C library this process runs
            call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        except (OSError, AttributeError):
            call = False
        _FALLOCATE[0] = call
    if call is False:
        return
    while call(fd, 0, offset, nbytes) != 0:
        code = ctypes.get_errno()
        if code != errno.EINTR:
            break
    else:
        return
    if code in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        _FALLOCATE[0] = False  # not this file system: plain writes
        return
    raise OSError(code, os.strerror(code))


class _Jobs:
    """Summarise-and-write jobs for large tensors: on ``workers`` threads, or at once with none.

    The first failure is kept (as a one-line message naming the key) and raised by the next
    :meth:`check` or :meth:`wait`; jobs queued after it are skipped.
    """

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list = []
        self._error: str | None = None
        self._lock = threading.Lock()

    def submit(self, row: dict, array: np.ndarray, fd: int, offset: int, stats: bool, folder: str,
               on_stored) -> None:
        if not self.workers:
            self._run(row, array, fd, offset, stats, folder, on_stored)
            self.check()
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="inkling-probe-write")
        if self.workers >= 2 and array.nbytes >= _SPLIT_BYTES:  # hash and write side by side
            left = Countdown(2, on_stored)
            self._futures.append(self._pool.submit(self._run, row, array, fd, offset, stats, folder, left.one,
                                                   write=False))
            self._futures.append(self._pool.submit(self._run, row, array, fd, offset, stats, folder, left.one,
                                                   summarise=False))
        else:
            self._futures.append(self._pool.submit(self._run, row, array, fd, offset, stats, folder, on_stored))
        if len(self._futures) > 256:
            self._futures = [f for f in self._futures if not f.done()]

    def _run(self, row, array, fd, offset, stats, folder, on_stored, summarise=True, write=True) -> None:
        """Hash and summarise the tensor, and write its bytes at ``offset`` (or one of the two)."""
        try:
            if self._error is None:
                if summarise:
                    _summarise(row, array, stats)
                if write and array.size:
                    _reserve_blocks(fd, offset, array.nbytes)
                    _pwrite_all(fd, memoryview(np.ascontiguousarray(array)).cast("B"), offset)
        except Exception as e:
            with self._lock:
                self._error = self._error or _failed(row, folder, e)
        finally:
            if on_stored is not None:
                on_stored()

    def check(self) -> None:
        if self._error is not None:
            raise DumpError(self._error)

    def wait(self, raise_error: bool = True) -> None:
        """Wait for every submitted job; then raise the first failure (unless told not to)."""
        futures, self._futures = self._futures, []
        for f in futures:
            f.result()  # _run catches everything: this only waits
        if raise_error:
            self.check()

    def shutdown(self) -> None:
        self.wait(raise_error=False)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


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

"""Writes one rank's dump as segment files that are complete the moment they appear.

A segment is written as ``<name>.tmp``, closed, and renamed into place, so a process killed at any
point leaves only whole segment files (and perhaps one ``.tmp`` the reader ignores). A segment ends
at every step boundary and when it passes the size limit, so every completed step survives.

Tensors under the pack threshold are appended to flat arrays of one step and stored dtype
(``/packs/<step>/<dtype>.<part>``, 1 MiB each, offsets in the index), written as each part fills:
creating an HDF5 dataset costs ~0.15 ms on this class of machine, more than everything else a small
tensor needs. A batch (GPU staging hands several tensors over in one call, store/batch.py) is packed
whatever its tensors' sizes, into parts of up to 4 MiB created with their space allocated: each
part is one dataset, and its tensors' bytes go to it by ``pwritev`` straight from the batch buffer
(no copy), so a GPU step of ~150 tensors creates ~15 datasets, not ~120.

From the second step on, large tensors that arrive one by one go into *arenas*: pack parts
allocated ahead, sized from the step before's sequence of large tensors (store/arenas.py), written
in place as each arrives; a step that differs gets datasets of its own from where it differs.

A tensor with a dataset of its own (or a place in an arena) is written in two parts: the HDF5 file
gets the dataset with its space allocated at once (``_create_allocated``), and a job (store/jobs.py)
computes the hash and statistics and ``pwrite``s the bytes to that space, on a job thread where the
machine has cores to spare. HDF5 itself is called from one thread only.

A step's large writes are spread over *lanes*: once a segment holds ``_LANE_MIN_BYTES``, further
batch parts and own datasets go to the lane (segment file) with the fewest bytes so far, so job
threads write into two files at once (one file's buffered writes serialise on its inode lock: the
step's tail, written after the forward, is bound by one file's write rate; scripts/bench_file_writes.py).
Each lane is a whole segment of its own (header, index); at the step's end the side lanes are closed
and renamed first, marked complete only through the steps completed before, and the main lane last
with the new mark: a kill between the renames leaves the step readable and marked incomplete, as a
segment split by size does.
Before the segment is closed (or abandoned), every job has finished: no write outlives its file.

This module imports numpy and h5py only: it runs inside the writer process (writer_process.py).
"""
from __future__ import annotations

import operator
import os
import tempfile
import time

import h5py
import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.arenas import ArenaPlan
from inkling_probe.store.batch import Countdown, add_each, split
from inkling_probe.store.diskio import _in_memory, _reserve_blocks
from inkling_probe.store.jobs import _Jobs, default_workers
from inkling_probe.store.refs import Refs
from inkling_probe.store.segment_file import (_allocated_dcpl, _Arena, _close_lane, _create_allocated,
                                              _create_compressed, _create_contiguous, _Lane, _Pack, _pack_kind,
                                              _same_pack, _set_text_attrs, _stored_type, _write_attrs)
from inkling_probe.store.summarise import _failed, _summarise, why

_GZIP_MIN_BYTES = 1 << 20
_PACK_PART_BYTES = 1 << 20
_BATCH_PART_BYTES = 4 << 20  # a batch's tensors are packed into parts of up to this many bytes
_LANE_MIN_BYTES = 8 << 20  # a segment's bytes before its large writes spread over a second file


def default_lanes(workers: int) -> int:
    """Segment files a step's large writes spread over: two where two job threads can write at once."""
    return 2 if workers >= 2 else 1


class SegmentWriter:
    """Appends tensors and index rows for one rank; call :meth:`end_segment` at step ends."""

    def __init__(self, path, rank: int, world_size: int, *, run_id: str, run_meta: str = "{}",
                 segment_mb: float = 1024, compress: str = "none", pack_kb: float = 256,
                 workers: int | None = None, lanes: int | None = None):
        self.dir = os.fspath(path)
        self.rank, self.world_size, self.run_id = rank, world_size, run_id
        self.run_meta = run_meta
        self.segment_bytes = int(segment_mb * (1 << 20))
        self.compress = compress
        self.pack_bytes = int(pack_kb * 1024)
        self._segment = 0  # the next segment file's number
        self._file = None  # the main lane's file (packs, small tensors, the completion mark)
        self._rows: list[tuple] = []
        self._bytes = 0  # bytes placed in this segment, every lane
        self._main: _Lane | None = None
        self._side: list[_Lane] = []  # side lanes of this segment (large writes only)
        self._complete = -1  # the last completion mark renamed into place
        self._packs: dict[tuple, _Pack] = {}
        self._pack_parts: dict[tuple, int] = {}
        self._spare_buffers: dict = {}  # dtype -> a pack buffer already written, for the next part
        self._jobs = _Jobs(default_workers() if workers is None else workers)
        self.lanes = default_lanes(self._jobs.workers) if lanes is None else max(1, lanes)
        self._refs = Refs()  # reference rows (store/refs.py), indexed as the segment ends
        self._plan = ArenaPlan()  # how large to make the next arena (store/arenas.py)
        self._arenas: dict[str, _Arena] = {}  # stored type -> the open arena of this segment
        self._splitting = False  # the segment ends by size, mid-step

    def _new_lane(self) -> _Lane:
        number = self._segment
        name = schema.segment_name(self.rank, number, self.run_id)
        path = os.path.join(self.dir, name + schema.TMP_SUFFIX)
        if os.path.lexists(path):
            raise DumpError(f"{path}: already exists (planted in the dump folder?); not written through")
        # "x": exclusive create (O_EXCL), so a file or a symbolic link planted there is never written through
        f = h5py.File(path, "x", libver="latest")
        self._segment += 1
        try:
            _write_attrs(f.id, {
                "format": schema.FORMAT_NAME, "schema_version": schema.SCHEMA_VERSION, "run_id": self.run_id,
                "rank": self.rank, "world_size": self.world_size, "segment": number,
                "created": time.time(), "run": self.run_meta,
            })
        except BaseException:
            f.close()
            raise
        return _Lane(number, f, [], {})

    def _open_segment(self) -> h5py.File:
        lane = self._new_lane()
        self._main, self._side = lane, []
        f = lane.file
        self._jobs.reserve = not _in_memory(lane.fd)  # asked once a segment, not a write
        self._file, self._rows, self._bytes, self._packs, self._pack_parts = f, lane.rows, 0, {}, {}
        self._arenas = {}
        self._groups = lane.groups
        return f

    def _lane_for(self, nbytes: int) -> _Lane:
        """The lane a large write of ``nbytes`` goes to: the main one until the segment holds
        ``_LANE_MIN_BYTES``, then the one with the fewest bytes (a side lane opened while fewer than
        ``lanes`` are open)."""
        main = self._main
        if self.lanes < 2 or self._bytes < _LANE_MIN_BYTES:
            lane = main
        else:
            lane = min([main, *self._side], key=operator.attrgetter("bytes"))
            if len(self._side) + 1 < self.lanes and lane.bytes > 0:
                lane = self._new_lane()
                self._side.append(lane)
        lane.bytes += nbytes
        return lane

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
        already handed to jobs are written); ``flat`` must stay unchanged until then.

        With storing on, packs allowed and no compression, the tensors are packed into parts (one
        dataset each, :meth:`_add_packed`); else each is added as by :meth:`add`."""
        if not (store and self.pack_bytes and len(rows) > 1 and self.compress == "none"):
            add_each(self.add, rows, flat, spans, sums, stats, store, on_stored)
            return
        left = Countdown(len(rows), on_stored)
        handed = [0]
        try:
            self._jobs.check()
            self._add_packed(split(rows, flat, spans, sums, stats), left.one, handed)
        except Exception as e:
            error = e if isinstance(e, DumpError) else DumpError(_failed(rows[min(handed[0], len(rows) - 1)],
                                                                         self.dir, e))
            for _ in range(len(rows) - handed[0]):
                left.one()  # tensors never handed to a job
            raise error from None

    def _add_packed(self, tensors, one_stored, handed: list) -> None:
        """Pack a batch's tensors ((row, view, stats) in order) into parts of up to
        ``_BATCH_PART_BYTES``; a tensor larger than a part is added alone. ``one_stored()`` once per
        tensor stored; ``handed[0]`` counts the tensors whose callback is no longer ours to call."""
        part: list = []
        part_bytes = 0
        for row, array, given in tensors:
            if self._file is not None and self._bytes >= self.segment_bytes:
                self._write_part(part, one_stored, handed)  # in the segment its rows are indexed in
                part, part_bytes = [], 0
                self._split(row["step"])
            if self._file is None:
                self._open_segment()
            if array.nbytes > _BATCH_PART_BYTES or array.ndim == 0 or array.size == 0:
                handed[0] += 1
                self._add(row, array, given, True, one_stored)
                continue
            if part and (not _same_pack(part[0], row, array) or part_bytes + array.nbytes > _BATCH_PART_BYTES):
                self._write_part(part, one_stored, handed)
                part, part_bytes = [], 0
            part.append((row, array, given))
            part_bytes += array.nbytes
        self._write_part(part, one_stored, handed)

    def _write_part(self, part: list, one_stored, handed: list) -> None:
        """Create one allocated pack dataset for ``part`` [(row, view, stats)] and hand its hashing,
        statistics and bytes to a job (the tensors back to back in the dataset's space, one
        ``pwritev``); ``one_stored()`` once per tensor, when the job is done with it."""
        if not part:
            return
        row, array, _ = part[0]
        path, lane, offset = self._allocated_part(row, array, _pack_kind(row, array), sum(a.size for _, a, _ in part),
                                                  sum(a.nbytes for _, a, _ in part))
        at = 0
        for row, array, _ in part:
            row["dataset"], row["offset"] = path, at
            at += array.size
            self._bytes += array.nbytes
            lane.rows.append(row)
        handed[0] += len(part)  # from here the job calls one_stored for each (also when it fails)
        self._jobs.submit_part(part, lane.fd, offset, self.dir, one_stored)

    def _allocated_part(self, row: dict, array: np.ndarray, kind: str, size: int, nbytes: int) -> tuple:
        """A pack part of ``size`` values of ``kind`` (``row``'s step, ``array``'s stored type), its
        space allocated now in the lane with room for ``nbytes``: (path, lane, file offset)."""
        key = (row["step"], kind)
        number = self._pack_parts.get(key, 0)
        self._pack_parts[key] = number + 1
        path = schema.pack_path(row["step"], kind, number)
        group_name, name = path.rsplit("/", 1)
        lane = self._lane_for(nbytes)
        dsid = h5py.h5d.create(self._group(group_name, lane).id, name.encode(), _stored_type(row, array),
                               h5py.h5s.create_simple((size,)), dcpl=_allocated_dcpl())
        return path, lane, dsid.get_offset()

    def add_ref(self, row: dict) -> None:
        """Add a reference row (``row["ref"]`` names an earlier tensor of the step, store/refs.py):
        no bytes; indexed beside its target, with its values, when the segment ends."""
        self._refs.add(row)

    def _split(self, step: int) -> None:
        """End the segment by size, part-way through ``step``."""
        self._splitting = True
        try:
            self.end_segment(complete_through_step=step - 1)
        finally:
            self._splitting = False

    def _add(self, row: dict, array: np.ndarray, stats: bool, store: bool, on_stored) -> None:
        if self._file is not None and self._bytes >= self.segment_bytes:
            self._split(row["step"])
        if self._file is None:  # (h5py's File.__bool__: ~20 us)
            self._open_segment()
        row["dataset"], row["offset"] = "", -1
        if store and array.nbytes >= self.pack_bytes:
            placed = self._in_arena(row, array)
            if placed is not None:
                lane, offset = placed
            else:
                lane = self._lane_for(array.nbytes)
                offset = self._create_dataset(lane, row, array)
            if offset is not None:  # the hash, stats and bytes are a job's
                if on_stored is None and self._jobs.workers:
                    array = array.copy()  # the caller may reuse its buffer once add() returns
                self._jobs.submit(row, array, lane.fd, offset, stats, self.dir, on_stored,
                                  reserve=placed is None)  # an arena's blocks were reserved whole
                lane.rows.append(row)
                return
            _summarise(row, array, stats)  # written through HDF5 (compressed): indexed in its lane
            lane.rows.append(row)
            if on_stored is not None:
                on_stored()
            return
        _summarise(row, array, stats)
        if store and array.nbytes < self.pack_bytes:
            self._append_to_pack(row, array)
        self._rows.append(row)
        if on_stored is not None:
            on_stored()

    def _in_arena(self, row: dict, array: np.ndarray) -> tuple | None:
        """Place a large tensor in its stored type's arena (store/arenas.py): (lane, file offset of
        its bytes), or None where it gets a dataset of its own (no plan for it, compression on,
        ``INKLING_PROBE_PACK_KB=0``)."""
        if not self.pack_bytes or self.compress != "none" or array.size == 0:
            return None
        kind, nbytes = _pack_kind(row, array), array.nbytes
        arena = self._arenas.get(kind)
        if arena is None or arena.used + array.size > arena.size:
            capacity = self._plan.capacity(row["step"], kind, nbytes)
            arena = None
            if capacity:
                size = capacity // array.itemsize
                arena = _Arena(*self._allocated_part(row, array, kind, size, capacity), size)
                if self._jobs.reserve:  # its blocks at once, not a fallocate a tensor (~20 us each)
                    _reserve_blocks(arena.lane.fd, arena.offset, capacity)
            self._arenas[kind] = arena
        self._plan.seen(row["step"], kind, nbytes)
        if arena is None:
            return None
        row["dataset"], row["offset"] = arena.path, arena.used
        at = arena.offset + arena.used * array.itemsize
        arena.used += array.size
        self._bytes += nbytes
        return arena.lane, at

    def _create_dataset(self, lane: _Lane, row: dict, array: np.ndarray) -> int | None:
        """The tensor's own dataset in ``lane``'s file; returns the file offset its bytes go to, or
        None once written (compressed data goes through HDF5's filters)."""
        row["dataset"] = schema.dataset_path(row["step"], row["key"], row["call"])
        group_name, name = row["dataset"].rsplit("/", 1)
        group = self._group(group_name, lane)
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
            pack = self._packs[key] = _Pack(schema.pack_path(row["step"], kind, part),
                                            self._pack_buffer(array), _stored_type(row, array))
        pack.buf[pack.used: pack.used + array.size] = array.reshape(-1)
        row["dataset"], row["offset"] = pack.path, pack.used
        pack.used += array.size
        self._bytes += array.nbytes

    def _pack_buffer(self, array: np.ndarray) -> np.ndarray:
        """A pack part's buffer for ``array``'s dtype: a written part's, reused (a fresh 1 MiB
        costs its page faults again, ~0.2 ms), else a new one."""
        size = max(_PACK_PART_BYTES // array.dtype.itemsize, array.size)
        spare = self._spare_buffers.pop(array.dtype, None)
        return spare if spare is not None and spare.size >= size else np.empty(size, dtype=array.dtype)

    def _write_pack(self, pack: "_Pack") -> None:
        group_name, name = pack.path.rsplit("/", 1)
        _create_contiguous(self._group(group_name), name, pack.buf[: pack.used], pack.ftype)
        self._spare_buffers[pack.buf.dtype] = pack.buf  # written: HDF5 has copied it

    def _group(self, name: str, lane: _Lane | None = None) -> h5py.Group:
        """A group of the open segment's main file (or ``lane``'s), created once (``require_group``
        costs ~1 ms a call)."""
        lane = lane or self._main
        group = lane.groups.get(name)
        if group is None:
            group = lane.groups[name] = lane.file.require_group(name)
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
        number = self._main.number
        try:
            self._finish(f, complete_through_step)
        except Exception as e:
            self.abort()
            raise DumpError(f"ending segment {number} of rank {self.rank} in {self.dir}: {why(e)}") from None

    def abort(self) -> None:
        """After a failure: close what is open without raising; its ``.tmp`` file stays (ignored)."""
        self._jobs.wait(raise_error=False)  # no job may write through the descriptor once closed
        lanes = [self._main, *self._side] if self._file is not None else []
        self._file, self._packs, self._main, self._side = None, {}, None, []
        for lane in lanes:
            try:
                lane.file.close()
            except Exception:
                pass

    def detach_after_fork(self) -> None:
        """In a forked child: point the inherited HDF5 file at an unlinked scratch file, so nothing the
        child's HDF5 library flushes or truncates (at its exit) reaches the parent's segment."""
        self._jobs = _Jobs(0)  # the job threads did not survive the fork
        if self._file is not None:
            for lane in (self._main, *self._side):
                with tempfile.TemporaryFile() as scratch:
                    os.dup2(scratch.fileno(), lane.fd)
        self._file, self._main, self._side = None, None, []

    def _finish(self, f: h5py.File, complete_through_step: int) -> None:
        """Close and rename the side lanes (marked complete through the steps completed before),
        then the main one with its packs and ``complete_through_step``."""
        self._refs.place([self._main, *self._side], final=not self._splitting)
        while self._side:
            _close_lane(self._side[0], self._complete)
            self._side.pop(0)
        self._write_packs()
        _close_lane(self._main, complete_through_step)
        self._file, self._main = None, None
        self._complete = max(self._complete, complete_through_step)

    def close(self, complete_through_step: int) -> None:
        try:
            self.end_segment(complete_through_step)
        finally:
            self._jobs.shutdown()

"""A recorded run read as one: the index of every rank's segment files (keys, steps, calls, ranks),
tensors read on demand. Foreign dumps are opened through store/reader.py's :func:`open_dump`."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict, defaultdict

import h5py
import numpy as np

from inkling_probe.errors import DumpError, KeyNotFound, RanksMissing, ValuesNotStored
from inkling_probe.store import consolidated, dp, raw, schema
from inkling_probe.store.segments import (Segment, first_line, missing_segments, one_run, open_segment,
                                           read_segment, read_values, safe_dataset, segment_files)

__all__ = ["Dump", "Segment", "MAX_OPEN_FILES", "PACK_CACHE_BYTES"]

MAX_OPEN_FILES = 32  # segment files kept open at once (least recently used closed first)
PACK_CACHE_BYTES = 32 << 20  # packs kept read by one Dump (each part up to 4 MiB)


class Dump:
    """A recorded run: the index of every rank's segments, tensors read on demand.

    Listing reads only the index datasets (kilobytes), never tensor data. An attention-DP dump is
    presented in the DP=1 layout (store/dp.py: ranks are attention-group ranks, requests in id
    order); ``dp_raw=True`` keeps every rank's own rows.
    """

    def __init__(self, path, dp_raw: bool = False):
        self.path = os.fspath(path)
        files, self.unfinished = segment_files(self.path)
        self.missing_segments = missing_segments(files, self.unfinished)  # deleted segments: their steps are gone
        cached = consolidated.cached_segments(self.path, files) if os.path.isdir(self.path) else {}
        self.segments: list[Segment] = []
        rows = []
        for f in files:
            seg, seg_rows = cached.get(f) or read_segment(f)
            self.segments.append(seg)
            rows.extend({**r, "_segment": len(self.segments) - 1} for r in seg_rows)
        world = one_run(self.path, self.segments)
        self.run_id = self.segments[0].run_id
        rows, self.dp_size, attn_size = (rows, 1, None) if dp_raw else dp.global_rows(rows)
        self.world_size = attn_size or world
        self.ranks = list(range(attn_size)) if attn_size else sorted({s.rank for s in self.segments})
        rows.sort(key=lambda r: (r["step"], r["seq"], r["rank"]))
        self._set_rows(rows)
        self._files: OrderedDict[int, h5py.File] = OrderedDict()
        self._packs: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._pack_bytes = 0  # the bytes of self._packs
        self._lock = threading.RLock()  # open files and packs: a read-ahead thread reads too

    def _set_rows(self, rows: list[dict]) -> None:
        """The index rows in execution order, indexed by key and by (key, step, call): no scan a read."""
        self._rows = rows
        self._by_key: dict[str, list[dict]] = defaultdict(list)
        self._by_ident: dict[tuple, list[dict]] = defaultdict(list)
        for r in rows:
            self._by_key[r["key"]].append(r)
            self._by_ident[(r["key"], r["step"], r["call"])].append(r)

    # -- listing ---------------------------------------------------------------------------
    @property
    def index(self) -> list[dict]:
        """Every index row (one per tensor per rank), in execution order (step, seq, rank)."""
        return [{k: v for k, v in r.items() if not k.startswith("_")} for r in self._rows]

    def keys(self) -> list[str]:
        """Keys in first-execution order."""
        return list(self._by_key)

    def steps(self, key: str) -> list[int]:
        return sorted({r["step"] for r in self._rows_for(key)})

    def complete_through_step(self, rank: int = 0) -> int:
        """The last step every segment of ``rank`` says was completed (-1: none)."""
        return max((s.complete_through_step for s in self.segments if s.rank == rank), default=-1)

    def rows(self, key: str, step: int = 0, call: int = 0) -> list[dict]:
        """The index rows of one tensor, one per rank that recorded it."""
        found = list(self._by_ident.get((key, step, call), ()))
        if not found:
            raise KeyNotFound(f"{self.path}: key {key!r} has no step {step}"
                              + (f" call {call}" if call else "") + f" (steps: {self.steps(key)})")
        return found

    def _rows_for(self, key: str) -> list[dict]:
        if key not in self._by_key:
            raise KeyNotFound(f"{self.path}: no key {key!r} ({len(self._by_key)} keys; try `inkling-probe ls`)")
        return self._by_key[key]

    # -- tensors ---------------------------------------------------------------------------
    def tensor(self, key: str, step: int = 0, rank: int | None = None, call: int = 0):
        """The torch tensor in its original dtype: the global view (shards reassembled) or one rank's.

        Imports torch; :meth:`array` reads the same values with numpy alone.
        """
        from inkling_probe.store.dtypes import decode

        rows = self._pick(key, step, rank, call)
        array = self._assemble(key, rows)
        try:
            return decode(array, rows[0]["dtype"]).reshape(array.shape)  # decode makes 0-d arrays 1-d
        except (ValueError, TypeError) as e:
            raise DumpError(f"{self.path}: key {key!r} step {step}: {first_line(e)}") from None

    def array(self, key: str, step: int = 0, rank: int | None = None, call: int = 0) -> np.ndarray:
        """The stored values as numpy, without torch: bf16 as exact float32, 8-bit floats as exact
        float16 (e8m0 as float32), packed fp4 as its uint8 bytes, every other dtype as itself.
        The index row's ``dtype`` (see :meth:`rows`) names the original dtype."""
        rows = self._pick(key, step, rank, call)
        return self._assemble(key, rows)

    def shards(self, key: str, step: int = 0, call: int = 0) -> dict:
        """Every rank's torch tensor for one key, by rank."""
        return {r["rank"]: self.tensor(key, step, r["rank"], call) for r in self.rows(key, step, call)}

    def _pick(self, key: str, step: int, rank: int | None, call: int) -> list[dict]:
        rows = self.rows(key, step, call)
        if rank is None:
            layout, world = rows[0]["shard"], {r["rank"] for r in rows}
            if layout != "replicated" and len(world) != self.world_size:
                raise RanksMissing(f"{self.path}: key {key!r} ({layout}) has ranks {sorted(world)} of "
                                f"{self.world_size}; can't reassemble (pass rank=)")
            return rows
        mine = [r for r in rows if r["rank"] == rank]
        if not mine:
            raise KeyNotFound(f"{self.path}: key {key!r} step {step} was not recorded by rank {rank}")
        return mine[:1]

    def _assemble(self, key: str, rows: list[dict]) -> np.ndarray:
        try:
            return self._combine(key, rows)
        except (ValueError, TypeError, IndexError) as e:  # a crafted or damaged index: shapes that don't fit
            raise DumpError(f"{self.path}: key {key!r} step {rows[0]['step']} can't be read as indexed "
                            f"({first_line(e)[:120]})") from None

    def _combine(self, key: str, rows: list[dict]) -> np.ndarray:
        layout = rows[0]["shard"]
        if len(rows) == 1 or layout == "replicated":
            return self._load_array(rows[0]).reshape(rows[0]["shape"])
        parts = [self._load_array(r).reshape(r["shape"]) for r in sorted(rows, key=lambda r: r["rank"])]
        if layout == "concat":
            return np.concatenate(parts, axis=rows[0]["dim"])
        if rows[0]["dtype"] == "float4_e2m1fn_x2":
            raise DumpError(f"{self.path}: key {key!r}: packed fp4 partial sums can't be added")
        total = np.zeros(parts[0].shape, np.float64)  # [..] partial sums in float64, one shard at a time
        for p in parts:
            total += p
        return _round_to(total, rows[0]["dtype"], parts[0].dtype)

    def _load_array(self, row: dict) -> np.ndarray:
        if dp.is_merged(row):
            return dp.load(self.path, row, self._load_array)
        if not row["dataset"] and row.get("ref"):
            return self._load_array(self._target(row))
        if not row["dataset"]:
            raise ValuesNotStored(f"{self.path}: key {row['key']!r} step {row['step']} holds stats only "
                            "(recorded with INKLING_PROBE_MODE=stats or hash)")
        seg = row["_segment"]
        if row["offset"] >= 0:
            array = self._pack(seg, row["dataset"])[row["offset"]: row["offset"] + row["numel"]]
            if array.size != row["numel"]:
                raise DumpError(f"{self.segments[seg].path}: pack {row['dataset']!r} is shorter than its index says")
        else:
            array = self._read(seg, row["dataset"])
        if array.size != row["numel"]:
            raise DumpError(f"{self.segments[seg].path}: {row['dataset']!r} holds {array.size} values, "
                            f"its index row {row['numel']}")
        return np.asarray(array)

    def _target(self, row: dict) -> dict:
        """The row a reference row's values are those of (its ``ref``: an earlier call in the same step
        and rank, stored in another segment file); the row itself when the writer placed both in
        one file (``dataset`` and ``offset`` copied: plain readers follow it). docs/FORMAT.md."""
        key, call = schema.parse_ref(row["ref"])
        for target in self._by_ident.get((key, row["step"], call), ()):
            if target["rank"] == row["rank"] and target["seq"] < row["seq"] and not target.get("ref"):
                return target
        raise DumpError(f"{self.path}: key {row['key']!r} step {row['step']} refers to {row['ref']!r}, "
                        "which this dump does not hold")

    def _read(self, segment: int, path: str) -> np.ndarray:
        """One dataset's values; a missing, linked or externally stored dataset is a DumpError.

        A plain contiguous dataset is read by ``preadv`` at its offset in the file (store/raw.py),
        outside the lock and without the GIL, so a read-ahead thread reads while numpy computes;
        any other layout through h5py, under the lock (h5py holds the GIL while it reads)."""
        with self._lock:
            f = self._file(segment)
            try:
                ds = safe_dataset(f, path)
                plan = raw.plan(ds)
                if plan is None:
                    return read_values(ds)
                fd = os.dup(f.id.get_vfd_handle())  # the file h5py opened; ours to close
            except DumpError:
                raise
            except Exception as e:  # h5py raises OSError, KeyError, ValueError... for damaged files
                raise DumpError(f"{f.filename}: can't read {path!r} ({first_line(e)})") from None
        try:
            return raw.read(fd, plan, f"{self.segments[segment].path}: {path!r}")
        finally:
            os.close(fd)

    def _pack(self, segment: int, path: str) -> np.ndarray:
        """A whole pack array (a part holds up to 4 MiB of a batch's tensors), cached: the packs read
        last, ``PACK_CACHE_BYTES`` at most (the oldest dropped first)."""
        cache_key = (segment, path)
        with self._lock:
            array = self._packs.get(cache_key)
            if array is None:  # the bytes held are counted as packs come and go: summing them on every
                array = self._read(segment, path).reshape(-1)  # read grew with the packs held (a decode step's each)
                while self._packs and self._pack_bytes + array.nbytes > PACK_CACHE_BYTES:
                    self._pack_bytes -= self._packs.popitem(last=False)[1].nbytes
                self._packs[cache_key] = array
                self._pack_bytes += array.nbytes
            return array

    def _file(self, segment: int) -> h5py.File:
        """The segment's open file; at most MAX_OPEN_FILES stay open (least recently used closed)."""
        if segment in self._files:
            self._files.move_to_end(segment)
            return self._files[segment]
        if len(self._files) >= MAX_OPEN_FILES:
            self._files.popitem(last=False)[1].close()
        self._files[segment] = open_segment(self.segments[segment].path)
        return self._files[segment]

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()
            self._packs.clear()
            self._pack_bytes = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _repr_html_(self) -> str:
        """Jupyter's view: the run, then keys with their steps, calls, ranks, dtypes, shapes and sizes."""
        from inkling_probe.store.dump_html import dump_html

        return dump_html(self)

    def __repr__(self):
        return (f"Dump({self.path!r}: {len(self._by_key)} keys, {len(self._rows)} tensors, "
                f"ranks {self.ranks} of {self.world_size})")


def _round_to(total: np.ndarray, dtype_name: str, stored: np.dtype) -> np.ndarray:
    """A float64 sum rounded (to nearest even) to the original dtype, kept in its stored type."""
    out = total.astype(stored)
    if dtype_name == "bfloat16":  # bf16 = the top 16 bits of fp32, rounded to nearest even
        bits = out.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
        out = np.where(np.isnan(out), out, rounded.view(np.float32))
    return out

"""Reads a dump (a folder of per-rank segment files) as one: keys, steps, tensors and the index."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass

import h5py
import numpy as np

from inkling_probe.errors import DumpError, KeyNotFound
from inkling_probe.store import dp, schema


@dataclass(frozen=True)
class Segment:
    """One segment file's identity and header."""

    path: str
    rank: int
    world_size: int
    complete_through_step: int
    run: dict


def open_dump(path) -> "Dump":
    """Open the dump at ``path`` (a dump folder, or one segment file of it)."""
    return Dump(path)


def as_dump(d) -> "Dump | None":
    """A Dump from a path, the Dump itself, or None for None (for APIs taking either)."""
    return d if d is None or isinstance(d, Dump) else Dump(d)


class Dump:
    """A recorded run: the index of every rank's segments, tensors read on demand.

    Listing reads only the index datasets (kilobytes), never tensor data. An attention-DP dump is
    presented in the DP=1 layout (store/dp.py: ranks are attention-group ranks, requests in id
    order); ``dp_raw=True`` keeps every rank's own rows.
    """

    def __init__(self, path, dp_raw: bool = False):
        self.path = os.fspath(path)
        files, self.unfinished = _segment_files(self.path)
        self.segments: list[Segment] = []
        rows = []
        for f in files:
            seg, seg_rows = _read_segment(f)
            self.segments.append(seg)
            rows.extend({**r, "_segment": len(self.segments) - 1} for r in seg_rows)
        rows, self.dp_size, attn_size = (rows, 1, None) if dp_raw else dp.global_rows(rows)
        self.world_size = attn_size or max(s.world_size for s in self.segments)
        self.ranks = list(range(attn_size)) if attn_size else sorted({s.rank for s in self.segments})
        rows.sort(key=lambda r: (r["step"], r["seq"], r["rank"]))
        self._rows = rows
        self._by_key: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            self._by_key[r["key"]].append(r)
        self._files: dict[int, h5py.File] = {}
        self._packs: dict[tuple, np.ndarray] = {}

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
        found = [r for r in self._rows_for(key) if r["step"] == step and r["call"] == call]
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

        a = self.array(key, step, rank, call)
        return decode(a, self._pick(key, step, rank, call)[0]["dtype"]).reshape(a.shape)

    def array(self, key: str, step: int = 0, rank: int | None = None, call: int = 0) -> np.ndarray:
        """The stored values as numpy, without torch: bf16 as exact float32, 8-bit floats as exact
        float16 (e8m0 as float32), packed fp4 as its uint8 bytes, every other dtype as itself.
        The index row's ``dtype`` (see :meth:`rows`) names the original dtype."""
        rows = self._pick(key, step, rank, call)
        if rank is not None:
            return self._load_array(rows[0]).reshape(rows[0]["shape"])
        return self._assemble(key, rows)

    def shards(self, key: str, step: int = 0, call: int = 0) -> dict:
        """Every rank's torch tensor for one key, by rank."""
        return {r["rank"]: self.tensor(key, step, r["rank"], call) for r in self.rows(key, step, call)}

    def _pick(self, key: str, step: int, rank: int | None, call: int) -> list[dict]:
        rows = self.rows(key, step, call)
        if rank is None:
            return rows
        mine = [r for r in rows if r["rank"] == rank]
        if not mine:
            raise KeyNotFound(f"{self.path}: key {key!r} step {step} was not recorded by rank {rank}")
        return mine[:1]

    def _assemble(self, key: str, rows: list[dict]) -> np.ndarray:
        layout = rows[0]["shard"]
        if layout == "replicated" or (len(rows) == 1 and self.world_size == 1):
            return self._load_array(rows[0]).reshape(rows[0]["shape"])
        world = {r["rank"] for r in rows}
        if len(world) != self.world_size:
            raise DumpError(f"{self.path}: key {key!r} ({layout}) has ranks {sorted(world)} of "
                            f"{self.world_size}; can't reassemble (pass rank=)")
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
        if not row["dataset"]:
            raise DumpError(f"{self.path}: key {row['key']!r} step {row['step']} holds stats only "
                            "(recorded with INKLING_PROBE_MODE=stats or hash)")
        f = self._file(row["_segment"])
        try:
            if row["offset"] >= 0:
                array = self._pack(row["_segment"], row["dataset"])[row["offset"]: row["offset"] + row["numel"]]
            else:
                array = f[row["dataset"]][()]
        except KeyError:
            raise DumpError(f"{f.filename}: index names {row['dataset']!r} but the dataset is missing") from None
        return np.asarray(array)

    def _pack(self, segment: int, path: str) -> np.ndarray:
        """A whole pack array, cached (packs hold small tensors only, so each is small)."""
        cache_key = (segment, path)
        if cache_key not in self._packs:
            if len(self._packs) >= 64:
                self._packs.pop(next(iter(self._packs)))
            self._packs[cache_key] = self._file(segment)[path][()]
        return self._packs[cache_key]

    def _file(self, segment: int) -> h5py.File:
        if segment not in self._files:
            self._files[segment] = h5py.File(self.segments[segment].path, "r")
        return self._files[segment]

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        self._packs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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


def _segment_files(path: str) -> tuple[list[str], list[str]]:
    if not os.path.exists(path):
        raise DumpError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        return [path], []
    names = sorted(os.listdir(path))
    files = [os.path.join(path, n) for n in names if schema.SEGMENT_RE.match(n)]
    unfinished = [os.path.join(path, n) for n in names if n.endswith(".h5" + schema.TMP_SUFFIX)]
    if not files:
        hint = f" ({len(unfinished)} unfinished segment(s): the run died before its first step ended)" \
            if unfinished else ""
        raise DumpError(f"{path}: not an inkling-probe dump (no rank*-seg*.h5 files){hint}")
    return files, unfinished


def _read_segment(path: str) -> tuple[Segment, list[dict]]:
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        kind = "truncated or corrupt HDF5 file" if _looks_hdf5(path) else "not an HDF5 file"
        raise DumpError(f"{path}: {kind} ({str(e).splitlines()[0][:80]})") from None
    with f:
        attrs = f.attrs
        if attrs.get("format") != schema.FORMAT_NAME:
            raise DumpError(f"{path}: an HDF5 file, but not an inkling-probe dump (no format attribute)")
        version = int(attrs.get("schema_version", -1))
        if version > schema.SCHEMA_VERSION:
            raise DumpError(f"{path}: schema version {version} is newer than this inkling-probe reads "
                            f"({schema.SCHEMA_VERSION}); upgrade inkling-probe")
        if "index" not in f:
            raise DumpError(f"{path}: segment has no index dataset (file damaged?)")
        seg = Segment(path, int(attrs["rank"]), int(attrs["world_size"]),
                      int(attrs.get("complete_through_step", -1)), json.loads(attrs.get("run", "{}")))
        return seg, [_row(r) for r in f["index"][()]]


def _row(r) -> dict:
    out = {}
    for name in schema.INDEX_FIELDS:
        v = r[name]
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, np.generic):
            v = v.item()
        out[name] = v
    out["shape_text"] = out["shape"]
    out["shape"] = schema.parse_shape(out["shape"])
    out["meta"] = json.loads(out["meta"]) if out["meta"] else {}
    return out


def _looks_hdf5(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8) == b"\x89HDF\r\n\x1a\n"

"""A rank's consolidated index: every segment's header and index rows in one file, so opening a dump
of thousands of segments reads one file a rank instead of one a segment (docs/FORMAT.md).

The segments stay authoritative. ``rankNNNNN-<run>.index`` (HDF5) lists, per segment, its file name,
size and modification time (ns) with its header and rows; a reader takes a segment's rows from it
only when a regular file of that name is in the folder now with that size and time, and that time
is at least :data:`SETTLED_NS` older than the consolidated index itself (file times tick coarsely:
a segment changed within the same tick, keeping its size, would otherwise pass for unchanged, the
"racy" case git's index knows); every other segment is opened as before, and a consolidated index that is missing, damaged, a link or of another
layout is ignored (never an error, never an answer of its own). Written once, when a rank's recording
closes (:func:`write_rank`): created exclusively as ``NAME.tmp`` beside the segments (``O_EXCL``, no
link followed), then renamed over ``NAME``.

Layout (plain HDF5): root attributes ``format`` = ``inkling-probe-index``, ``version`` = 1,
``written_ns`` (Unix time in ns once every segment had been read);
``/segments`` one row a segment (``name``, ``size``, ``mtime_ns``, ``rank``, ``world_size``,
``complete_through_step``, ``run_id``, ``run``), ``/index`` the segments' index rows (the fields of
a segment's ``/index``) plus ``segment``, the row of ``/segments`` each came from.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time

import h5py
import numpy as np

from inkling_probe.store import schema
from inkling_probe.store.headers import _attr, read_table

FORMAT = "inkling-probe-index"
VERSION = 1
SETTLED_NS = 2_000_000_000  # a cached segment's time must be this much older than the index's (racy case)
NAME_RE = re.compile(r"^rank(\d{5})(?:-([0-9a-f]{12}))?\.index$")
_STR = h5py.string_dtype("utf-8")
SEGMENTS_DTYPE = np.dtype([("name", _STR), ("size", "<i8"), ("mtime_ns", "<i8"), ("rank", "<i4"),
                           ("world_size", "<i4"), ("complete_through_step", "<i8"), ("run_id", _STR),
                           ("run", _STR)])
ROWS_DTYPE = np.dtype([(n, schema.INDEX_DTYPE[n]) for n in schema.INDEX_FIELDS] + [("segment", "<i4")])
_SEG_TYPE = h5py.h5t.py_create(SEGMENTS_DTYPE)
_ROWS_TYPE = h5py.h5t.py_create(ROWS_DTYPE)


def file_name(rank: int, run_id: str) -> str:
    """``rank00000-<run>.index``: HDF5, named apart from segments (``*.h5`` stays the data)."""
    return f"rank{rank:05d}-{run_id}.index" if run_id else f"rank{rank:05d}.index"


def identity(st: os.stat_result) -> tuple[int, int]:
    """What a cached segment must still match: its size and modification time (ns)."""
    return int(st.st_size), int(st.st_mtime_ns)


# -- writing ---------------------------------------------------------------------------------------
def write_rank(folder: str, rank: int, run_id: str | None = None) -> str | None:
    """Consolidate ``rank``'s segments of run ``run_id`` (default: the one run of that rank's segment
    names) in ``folder``, reading each segment's header and index; returns the path written, or None when there is nothing to write or it could not be
    written (an existing file or link in the way, a read-only folder: readers then open the segments,
    as without it). Never raises: a damaged segment is left out (readers open it and say so)."""
    try:
        return _write_rank(os.fspath(folder), rank, run_id)
    except Exception:  # an optimisation only: without it readers open every segment
        return None


def _write_rank(folder: str, rank: int, run_id: str) -> str | None:
    from inkling_probe.store.headers import read_header_and_index

    names = [(n, schema.parse_segment_name(n)) for n in schema.in_segment_order(os.listdir(folder))
             if schema.SEGMENT_RE.match(n)]
    if run_id is None:
        runs = {p[2] for _, p in names if p[0] == rank}
        if len(runs) != 1:
            return None
        (run_id,) = runs
    segs, rows = [], []
    for name, parsed in names:
        if parsed[0] != rank or parsed[2] != run_id:
            continue
        path = os.path.join(folder, name)
        try:
            before = os.lstat(path)
            if not stat.S_ISREG(before.st_mode):
                continue
            attrs, index = read_header_and_index(path)
            if index is None or identity(os.lstat(path)) != identity(before):
                continue
        except Exception:  # damaged: readers open it and say so
            continue
        seg = (name, *identity(before), int(attrs["rank"]), int(attrs["world_size"]),
               int(attrs.get("complete_through_step", -1)), str(attrs.get("run_id", "")), str(attrs.get("run", "{}")))
        part = np.zeros(index.shape, ROWS_DTYPE)
        for f in schema.INDEX_FIELDS:
            part[f] = index[f]
        part["segment"] = len(segs)
        segs.append(seg)
        rows.append(part)
    if not segs:
        return None
    return _write(folder, file_name(rank, run_id), np.array(segs, SEGMENTS_DTYPE), np.concatenate(rows),
                  time.time_ns())


def _write(folder: str, name: str, segs: np.ndarray, rows: np.ndarray, written_ns: int) -> str | None:
    final, tmp = os.path.join(folder, name), os.path.join(folder, name + schema.TMP_SUFFIX)
    try:
        # "x": exclusive create (O_EXCL), so a file or a symbolic link planted there is never written through
        f = h5py.File(tmp, "x", libver="latest")
    except Exception:
        return None
    try:
        with f:
            f.attrs.update({"format": FORMAT, "version": VERSION, "written_ns": written_ns})
            f.create_dataset("segments", data=segs)
            f.create_dataset("index", data=rows)
        os.replace(tmp, final)  # over an older run's index of this name (a link there is replaced, not followed)
        return final
    except Exception:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return None


# -- reading ---------------------------------------------------------------------------------------
def cached_segments(folder: str, files: list[str]) -> dict:
    """``path -> (Segment, rows)`` for the segment ``files`` of ``folder`` that a consolidated index
    holds as they are now (a regular file of that name, size and modification time); every other
    file is absent (to open). Any trouble with a consolidated index (missing, damaged, a link,
    another layout) leaves it out."""
    from inkling_probe.store.segments import Segment

    names = [n for n in os.listdir(folder) if NAME_RE.match(n)]
    if not names:
        return {}
    wanted = {os.path.basename(p): p for p in files}
    stats = {}
    for p in files:
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            stats[p] = st
    out: dict = {}
    for name in sorted(names):
        try:
            segs, rows, written_ns = _read(os.path.join(folder, name))
        except Exception:
            continue
        settled = written_ns - SETTLED_NS
        order = np.argsort(rows["segment"], kind="stable")
        rows = rows[order]
        bounds = np.searchsorted(rows["segment"], np.arange(len(segs) + 1))
        for i, s in enumerate(segs):
            seg_name = _text(s["name"])
            path = wanted.get(seg_name)
            if path not in stats or path in out or identity(stats[path]) != (int(s["size"]), int(s["mtime_ns"])) \
                    or int(s["mtime_ns"]) >= settled:
                continue
            try:
                seg = Segment(path, int(s["rank"]), int(s["world_size"]), int(s["complete_through_step"]),
                              json.loads(_text(s["run"]) or "{}"), _text(s["run_id"]))
                out[path] = (seg, _rows(rows[bounds[i]: bounds[i + 1]]))
            except Exception:
                continue
    return out


_FIELDS = schema.INDEX_FIELDS
_REQUIRED = (*schema.REQUIRED_FIELDS, "segment")  # an index written before ``ref`` still serves


def _rows(table: np.ndarray) -> list[dict]:
    """The rows as segments.read_segment gives them (one ``tolist`` instead of a field at a time)."""
    out = []
    for values in table[list(_FIELDS)].tolist():
        r = {k: v.decode() if isinstance(v, bytes) else v for k, v in zip(_FIELDS, values)}
        r["shape_text"] = r["shape"]
        r["shape"] = schema.parse_shape(r["shape"])
        r["meta"] = json.loads(r["meta"]) if r["meta"] else {}
        out.append(r)
    return out


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _read(path: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Both tables of a consolidated index (checked as a segment's index is: hard links to
    one-dimensional compound datasets inside the file, every field present)."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise ValueError("not a regular file")
    fid = h5py.h5f.open(path.encode(), h5py.h5f.ACC_RDONLY)
    try:
        root = h5py.h5g.open(fid, b"/")
        if _attr(root, "format") != FORMAT or int(_attr(root, "version")) != VERSION:
            raise ValueError("not a consolidated index of this version")
        return (read_table(root, b"segments", SEGMENTS_DTYPE, _SEG_TYPE),
                read_table(root, b"index", ROWS_DTYPE, _ROWS_TYPE, _REQUIRED), int(_attr(root, "written_ns")))
    finally:
        fid.close()

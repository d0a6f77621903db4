"""The files of a dump, opened as untrusted input: which segment files a folder holds (regular files
only), one run per folder, each segment's header and index, and datasets reached through hard links
inside the file only (docs/FORMAT.md, "Untrusted folders")."""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass

import h5py
import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.stats import bf16_bits_to_float32


@dataclass(frozen=True)
class Segment:
    """One segment file's identity and header."""

    path: str
    rank: int
    world_size: int
    complete_through_step: int
    run: dict
    run_id: str = ""  # "" in schema version 1


def segment_files(path: str) -> tuple[list[str], list[str]]:
    if not os.path.lexists(path):
        raise DumpError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        _check_regular(path)
        return [path], []
    names = schema.in_segment_order(os.listdir(path))
    ours = [n for n in names if schema.parse_segment_name(n) or schema.LOCK_RE.match(n)]
    for n in ours:
        _check_regular(os.path.join(path, n))
    files = [os.path.join(path, n) for n in ours if schema.SEGMENT_RE.match(n)]
    unfinished = [os.path.join(path, n) for n in ours if n.endswith(".h5" + schema.TMP_SUFFIX)]
    if not files:
        hint = f" ({len(unfinished)} unfinished segment(s): the run died before its first step ended)" \
            if unfinished else ""
        raise DumpError(f"{path}: not an inkling-probe dump (no rank*-seg*.h5 files){hint}")
    return files, unfinished


def missing_segments(files: list[str], unfinished: list[str]) -> list[str]:
    """Segment numbers absent between a rank's first and last (a writer numbers each rank's segments
    0, 1, 2, ... and never skips one): ``["rank 0: segment 2"]``, one line per rank with a gap."""
    from inkling_probe.store import gaps

    numbers: dict[int, set[int]] = {}
    for path in files + unfinished:
        parsed = schema.parse_segment_name(os.path.basename(path))
        if parsed:
            numbers.setdefault(parsed[0], set()).add(parsed[1])
    out = []
    for rank, present in sorted(numbers.items()):
        holes = gaps.missing(present, max(present) + 1)
        if holes:
            n = gaps.count(holes)
            out.append(f"rank {rank}: {'segment' if n == 1 else f'{n} segments'} {gaps.text(holes)}")
    return out


def _check_regular(path: str) -> None:
    """Refuse links, FIFOs, devices...: opening a FIFO would hang, a link would lead elsewhere."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) \
            else "not a regular file"
        raise DumpError(f"{path}: {kind}; a dump holds regular files only")


def one_run(path: str, segments: list[Segment]) -> int:
    """The world size of the one run ``segments`` belong to; a folder mixing runs is refused."""
    runs = sorted({(s.run_id, s.world_size) for s in segments})
    if len(runs) > 1:
        shown = "; ".join(f"run {r or '(schema 1)'} world size {w}: ranks "
                          f"{sorted({s.rank for s in segments if (s.run_id, s.world_size) == (r, w)})}"
                          for r, w in runs)
        raise DumpError(f"{path}: mixes {len(runs)} runs ({shown}); re-record into an empty folder "
                        "or with INKLING_PROBE_OVERWRITE=1")
    world = runs[0][1]
    beyond = sorted({s.rank for s in segments if not 0 <= s.rank < world})
    if beyond:
        raise DumpError(f"{path}: rank {beyond[0]} is outside world size {world}")
    return world


def open_segment(path: str) -> h5py.File:
    _check_regular(path)
    try:
        return h5py.File(path, "r")
    except OSError as e:
        kind = "truncated or corrupt HDF5 file" if _looks_hdf5(path) else "not an HDF5 file"
        raise DumpError(f"{path}: {kind} ({first_line(e)[:80]})") from None


def safe_dataset(f: h5py.File, path: str) -> h5py.Dataset:
    """``f[path]`` when every link on the way is a hard link and the data lies inside the file:
    external and soft links, external raw storage and virtual datasets are refused (a crafted dump
    could read other files through them)."""
    node = f
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        link = node.get(part, getlink=True)
        if link is None:
            raise DumpError(f"{f.filename}: index names {path!r} but the dataset is missing")
        if not isinstance(link, h5py.HardLink):
            raise DumpError(f"{f.filename}: {'/'.join(parts[: i + 1])!r} is a {type(link).__name__}; "
                            "a dump holds hard links only")
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise DumpError(f"{f.filename}: {path!r} is not a dataset")
    if node.is_virtual or node.id.get_create_plist().get_external_count():
        raise DumpError(f"{f.filename}: {path!r} keeps its data outside the file; refused")
    return node


def read_values(ds: h5py.Dataset) -> np.ndarray:
    """A dataset's values as stored, bit-exact: a bfloat16 dataset (schema 3) comes as its exact
    float32 (its bits read as they are, then shifted up: no HDF5 conversion touches a NaN payload)."""
    tid = ds.id.get_type()
    if not schema.is_bf16_type(tid):
        return ds[()]
    bits = np.empty(ds.shape, dtype=np.uint16)
    if bits.size:
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=tid)
    return bf16_bits_to_float32(bits)


def first_line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__


def read_segment(path: str) -> tuple[Segment, list[dict]]:
    """A segment's identity and header, and its index rows (store/headers.py: no tensor data read)."""
    from inkling_probe.store.headers import read_header_and_index

    _check_regular(path)
    try:
        attrs, index = read_header_and_index(path)
    except OSError as e:
        kind = "truncated or corrupt HDF5 file" if _looks_hdf5(path) else "not an HDF5 file"
        raise DumpError(f"{path}: {kind} ({first_line(e)[:80]})") from None
    except Exception as e:  # damaged or crafted attributes and index
        raise DumpError(f"{path}: damaged segment ({first_line(e)[:120]})") from None
    try:
        return _header(path, attrs, index)
    except DumpError:
        raise
    except Exception as e:
        raise DumpError(f"{path}: damaged segment ({first_line(e)[:120]})") from None


def _header(path: str, attrs: dict, index) -> tuple[Segment, list[dict]]:
    if attrs.get("format") != schema.FORMAT_NAME:
        raise DumpError(f"{path}: an HDF5 file, but not an inkling-probe dump (no format attribute)")
    version = int(attrs.get("schema_version", -1))
    if version > schema.SCHEMA_VERSION:
        raise DumpError(f"{path}: schema version {version} is newer than this inkling-probe reads "
                        f"({schema.SCHEMA_VERSION}); upgrade inkling-probe")
    if index is None:
        raise DumpError(f"{path}: segment has no index dataset (file damaged?)")
    seg = Segment(path, int(attrs["rank"]), int(attrs["world_size"]),
                  int(attrs.get("complete_through_step", -1)), json.loads(attrs.get("run", "{}")),
                  str(attrs.get("run_id", "")))
    return seg, [_row(r) for r in index]


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

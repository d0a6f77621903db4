"""A segment's header attributes and index, read through h5py's low-level API.

Opening a dump reads every segment's header and index (``ls`` reads nothing else). Through
``h5py.File``, ``attrs`` and ``Dataset[()]`` that cost ~5 ms a segment (24 s for 5000 segments),
nearly all of it h5py's per-call machinery: file-access property lists, weak-reference registries,
dtype discovery and a new conversion path for every read. Here a segment is one ``H5Fopen``, one
read per attribute and one read of the index into a dtype built once (scripts/bench_ls.py). The
untrusted-file checks are those of segments.safe_dataset: the index must be a hard link to a
dataset that keeps its data inside the file, with every index field present.
"""
from __future__ import annotations

import h5py
import numpy as np

from inkling_probe.store import schema

HEADER_ATTRS = ("format", "schema_version", "rank", "world_size", "complete_through_step", "run", "run_id")
_VSTR = h5py.string_dtype("utf-8")
_VSTR_TYPE = h5py.h5t.py_create(_VSTR)
_INDEX_TYPE = h5py.h5t.py_create(schema.INDEX_DTYPE)


class Damaged(ValueError):
    """The header or index is not what the writer writes (the reader says which file)."""


def read_header_and_index(path: str) -> tuple[dict, np.ndarray]:
    """(header attributes present, by name; the index as a structured array of schema.INDEX_DTYPE).

    OSError when HDF5 can't open the file; :class:`Damaged` (or an h5py error) when its content is
    not a segment's."""
    fid = h5py.h5f.open(path.encode(), h5py.h5f.ACC_RDONLY)
    try:
        root = h5py.h5g.open(fid, b"/")
        attrs = {}
        for name in HEADER_ATTRS:
            value = _attr(root, name)
            if value is not _ABSENT:
                attrs[name] = value
        if attrs.get("format") != schema.FORMAT_NAME or not _has_link(root, b"index"):
            return attrs, None  # the caller says which (not a dump, no index)
        return attrs, _index(root)
    finally:
        fid.close()


_ABSENT = object()


def _attr(loc, name: str):
    try:
        attr = h5py.h5a.open(loc, name.encode())
    except KeyError:  # cheaper than asking H5Aexists first for the attributes that are there
        return _ABSENT
    if attr.shape != ():
        raise Damaged(f"attribute {name!r} is not a scalar")
    tid = attr.get_type()
    if tid.get_class() == h5py.h5t.STRING:
        if tid.is_variable_str():
            out = np.empty((), dtype=_VSTR)
            attr.read(out, mtype=_VSTR_TYPE)
        else:
            out = np.empty((), dtype=attr.dtype)
            attr.read(out)
        value = out[()]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    out = np.empty((), dtype=attr.dtype)
    attr.read(out)
    return out[()]


def _has_link(group, name: bytes) -> bool:
    return group.links.exists(name)


def _index(root) -> np.ndarray:
    return read_table(root, b"index", schema.INDEX_DTYPE, _INDEX_TYPE, schema.REQUIRED_FIELDS)


def read_table(root, name: bytes, dtype: np.dtype, mtype, fields=None) -> np.ndarray:
    """The one-dimensional compound table ``name`` under the group ``root``, read into ``dtype`` through
    the memory type ``mtype``: a hard link to a dataset whose data is inside the file, holding every
    field of ``fields`` (default: ``dtype``'s); anything else is :class:`Damaged` saying what."""
    label = name.decode()
    if root.links.get_info(name).type != h5py.h5l.TYPE_HARD:
        raise Damaged(f"{label!r} is not a hard link; a dump holds hard links only")
    if h5py.h5o.get_info(root, name).type != h5py.h5o.TYPE_DATASET:
        raise Damaged(f"{label!r} is not a dataset")
    ds = h5py.h5d.open(root, name)
    plist = ds.get_create_plist()
    if plist.get_layout() == h5py.h5d.VIRTUAL or plist.get_external_count():
        raise Damaged(f"{label!r} keeps its data outside the file; refused")
    tid = ds.get_type()
    if tid.get_class() != h5py.h5t.COMPOUND or ds.shape is None or len(ds.shape) != 1:
        raise Damaged(f"{label!r} is not a one-dimensional table")
    names = {tid.get_member_name(i).decode() for i in range(tid.get_nmembers())}
    missing = [f for f in (fields or dtype.names) if f not in names]
    if missing:
        raise Damaged(f"{label} field {missing[0]!r} is missing")
    rows = np.zeros(ds.shape, dtype=dtype)
    if rows.size:
        ds.read(h5py.h5s.ALL, h5py.h5s.ALL, rows, mtype=mtype)
    for f in dtype.names:  # an optional text field the file lacks (older dumps): "" (np.zeros left 0)
        if f not in names and dtype[f].kind == "O":
            rows[f] = ""
    return rows

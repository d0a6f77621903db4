"""Reference rows: an index row whose values are an earlier row's of the same step and rank.

The recorder sends a reference (recorder/once.py) when a probed tensor is provably one it recorded
earlier in the step; its row names the target in ``ref`` (``KEY`` or ``KEY#CALL``). The writer
indexes it when the segment ends, in the file that holds the target, with the target's ``dataset``,
``offset``, ``storage``, hash and statistics copied: plain h5py readers follow ``dataset``/``offset``
as for any row, and the step's crash safety is the target's (one file, one rename).

Only when a segment split by size (``INKLING_PROBE_SEGMENT_MB``) put the target in an earlier file
is the row indexed in the main file with ``dataset`` empty: readers then find the target by
``ref`` (store/dump.py).

References arrive before their targets where staging batches tensors (the target still in a
batch): those wait for the segment end, or across a size split.

A reference of another shape (a reshaped view: the same bytes in the same order, recorder/once.py)
keeps its own ``shape``; its ``hash`` is :func:`view_hash` of the target's, as a content hash covers
the shape: equal only for views of the same shape whose targets' hashes are equal.
"""
from __future__ import annotations

import operator

import xxhash

from inkling_probe.store import schema
from inkling_probe.store.stats import NAN_STATS

VALUE_FIELDS = ("storage", "mean", "rms", "absmax", "nan", "inf", "hash", "dataset", "offset")
_VALUES = operator.itemgetter(*VALUE_FIELDS)
_UNRESOLVED = {**NAN_STATS, "nan": -1, "inf": -1, "hash": b"", "dataset": "", "offset": -1}


def view_hash(target_hash: bytes, dtype: str, shape: str) -> bytes:
    """The ``hash`` of a reference whose shape is not its target's: XXH3-64 (hex) of
    ``view:DTYPE:SHAPE:`` and the target's hash; empty where the target's is. Equal hashes still mean
    equal bits (equal target bits, the same shape); never equal to a content hash but by chance."""
    if not target_hash:
        return b""
    raw = target_hash.encode() if isinstance(target_hash, str) else bytes(target_hash)
    return xxhash.xxh3_64_hexdigest(f"view:{dtype}:{shape}:".encode() + raw).encode()


def _copy_values(row: dict, target: dict) -> None:
    """``row`` takes ``target``'s values (VALUE_FIELDS); a view of another shape its own hash."""
    row.update(zip(VALUE_FIELDS, _VALUES(target)))  # (a generator of pairs costs twice as much)
    if row["shape"] != target["shape"]:
        row["hash"] = view_hash(target["hash"], row["dtype"], row["shape"])


class Refs:
    """The reference rows a :class:`~inkling_probe.store.writer.SegmentWriter` has not indexed yet."""

    def __init__(self):
        self.pending: list[dict] = []
        self._earlier: dict[tuple, dict] = {}  # (step, key, call) -> row, in files this step closed by size

    def add(self, row: dict) -> None:
        self.pending.append(row)

    def place(self, lanes: list, final: bool) -> None:
        """Index each pending reference in the lane (``lanes[0]``: the main one) holding its target.

        ``final``: the segment ends at a step boundary or the close, so every target has arrived; a
        reference whose target never did is indexed unresolved. Else (a split by size) those wait
        for the next segment."""
        if self.pending or not final:
            targets = {(r["step"], r["key"], r["call"]): (lane, r) for lane in lanes for r in lane.rows
                       if not r.get("ref")}
            self.pending = [row for row in self.pending if not self._placed(row, targets, lanes[0], final)]
            if not final:  # later references of this step may name these
                self._earlier.update((k, r) for k, (_, r) in targets.items())
        if final:
            self._earlier.clear()

    def _placed(self, row: dict, targets: dict, main, final: bool) -> bool:
        key, _, call = row["ref"].partition("#")  # (schema.parse_ref, inline: ~200 references a step)
        ident = (row["step"], key, int(call) if call else 0)
        found = targets.get(ident)
        if found is not None:
            lane, target = found
            _copy_values(row, target)
            lane.rows.append(row)
            return True
        earlier = self._earlier.get(ident)
        if earlier is None and not final:
            return False
        if earlier is not None:
            _copy_values(row, earlier)
        else:
            row.update(_UNRESOLVED)
        row["dataset"], row["offset"] = "", -1  # the target is in another file: readers follow ``ref``
        main.rows.append(row)
        return True

"""A foreign dump written into our HDF5 store (``inkling-probe import``): every rank's shard as it
was recorded (fused tensors already split by the map), with its layout, so the store reassembles
exactly what the foreign folder read directly does, and with the statistics and hashes the
foreign files lack.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid

import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.foreign.dump import UNDECLARED
from inkling_probe.store.stats import float32_to_bf16_bits


def convert(dump, dst: str, progress=None) -> dict:
    """Write ``dump`` (a ForeignDump) as a new dump at ``dst`` (absent or an empty folder).

    The dump is written into a hidden folder beside ``dst`` and renamed into place once whole; on
    any failure it is removed, so ``dst`` is never left half-written.
    Returns {"tensors": n, "ranks": [...], "keys": n}. ``progress(done, total)`` per tensor.
    """
    rows = dump._rows
    undeclared = next((r for r in rows if r["shard"] == UNDECLARED), None)
    if undeclared is not None:
        raise DumpError(f"{dump.path}: key {undeclared['key']!r} was recorded by {dump.world_size} ranks and no "
                        "name map rule declares how its shards combine; add a rule with shard = concat/"
                        "partial/replicated (or drop the key) before importing")
    _check_destination(dst)
    parent, name = os.path.split(os.path.abspath(dst))
    tmp = os.path.join(parent, f".{name}.importing-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        done = _write(dump, tmp, progress)
        _check_destination(dst)
        os.rename(tmp, dst)  # over an empty folder, or a new name
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return done


def _write(dump, dst: str, progress) -> dict:
    from inkling_probe.store.writer import SegmentWriter

    rows = dump._rows
    run_id = uuid.uuid4().hex[:12]
    meta = json.dumps({"imported_from": os.path.abspath(dump.path), **dump.segments[0].run}, sort_keys=True)
    done = 0
    for rank in dump.ranks:
        writer = SegmentWriter(dst, rank, dump.world_size, run_id=run_id, run_meta=meta, workers=0)
        mine = [r for r in rows if r["rank"] == rank]
        try:
            for i, r in enumerate(mine):
                if i and r["step"] != mine[i - 1]["step"]:
                    writer.end_segment(complete_through_step=mine[i - 1]["step"])
                array = _stored_form(dump._load_array(r), r["dtype"])
                writer.add(_row(r, array), array)
                done += 1
                if progress:
                    progress(done, len(rows))
            writer.close(complete_through_step=mine[-1]["step"] if mine else -1)
        except BaseException:
            writer.abort()
            raise
    return {"tensors": len(rows), "ranks": dump.ranks, "keys": len(dump.keys())}


def _check_destination(dst: str) -> None:
    if os.path.lexists(dst) and (not os.path.isdir(dst) or os.path.islink(dst) or os.listdir(dst)):
        raise DumpError(f"{dst}: already exists and is not an empty folder; import into a new path")


def _stored_form(array: np.ndarray, dtype: str) -> np.ndarray:
    """What the writer stores for an array as the reader returns it: bf16 back to its bits."""
    if dtype == "bfloat16" and array.dtype == np.float32:
        return float32_to_bf16_bits(array)
    return np.ascontiguousarray(array)


def _storage(dtype: str, array: np.ndarray) -> str:
    if dtype.startswith("float8"):
        return "upcast"
    if dtype == "float4_e2m1fn_x2":
        return "raw"
    return "native"


def _row(r: dict, array: np.ndarray) -> dict:
    meta = dict(r["meta"])
    return {"key": r["key"], "step": r["step"], "seq": r["seq"], "call": r["call"], "rank": r["rank"],
            "shape": schema.shape_text(array.shape), "dtype": r["dtype"], "storage": _storage(r["dtype"], array),
            "shard": r["shard"], "dim": r["dim"], "token_dim": r["token_dim"], "token_start": r["token_start"],
            "numel": int(array.size), "meta": json.dumps(meta, sort_keys=True)}

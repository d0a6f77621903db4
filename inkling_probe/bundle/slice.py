"""slice.h5: the tensors around each culprit, from every dump, as one small valid dump file.

Keys are the compared keys prefixed with the dump they came from: ``ref/KEY``, ``cand/KEY``,
``control/KEY``. Around a culprit means: the culprit, the ``window`` rows before it and the one
after it in execution order (its inputs and its consumer), and every key under it in either dump
(``KEY.in.0``, ``KEY.input_scale``: the recorded module inputs and scales). Tensors larger than
``max_tensor_mb`` are left out and listed. numpy and h5py only; shards are stored reassembled.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field

from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.writer import SegmentWriter
from inkling_probe.views.doc import culprits, rows

@dataclass
class SliceResult:
    path: str
    keys: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "side/KEY (why)"
    nbytes: int = 0


def wanted(doc: dict, dumps: dict, window: int = 2) -> list[tuple[str, str, int, int]]:
    """(side, dump key, step, call) to copy, in execution order, without repeats."""
    out: list = []
    for c in culprits(doc):
        step = c.get("step", 0)
        order = [r for r in rows(doc, step) if r.get("against", "reference") == "reference"]
        at = next((i for i, r in enumerate(order) if r["key"] == c["key"] and r.get("call", 0) == c.get("call", 0)), None)
        near = order[max(at - window, 0): at + 2] if at is not None else []
        for r in near:
            for side, col in (("ref", "ref_key"), ("cand", "cand_key"), ("control", "cand_key")):
                if side in dumps:
                    out.append((side, r.get(col) or r["key"], step, r.get("call", 0)))
        for side, d in dumps.items():
            base = _dump_key(order[at], side) if at is not None else c["key"]
            out += [(side, k, step, 0) for k in d.keys() if k.startswith(base + ".")]
    seen, unique = set(), []
    for item in out:
        if item not in seen:
            seen.add(item)
            unique.append(item)
    return unique


def _dump_key(row: dict, side: str) -> str:
    return (row.get("ref_key") if side == "ref" else row.get("cand_key")) or row["key"]


def write_slice(doc: dict, dumps: dict, path: str, window: int = 2, max_tensor_mb: float = 8) -> SliceResult:
    """Write slice.h5 at ``path`` (a single segment file) from ``dumps`` = {side: Dump}."""
    result = SliceResult(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp_dir = os.path.join(folder, ".slice-tmp")
    os.makedirs(tmp_dir, exist_ok=False)
    meta = {"slice_of": {s: os.path.basename(os.path.normpath(d.path)) for s, d in dumps.items()},
            "culprits": [c["key"] for c in culprits(doc)]}
    # One file: one lane, and no roll-over (a slice holds a few windows of tensors of at most
    # max_tensor_mb each); anything else would be a slice that silently dropped files.
    writer = SegmentWriter(tmp_dir, 0, 1, run_id=uuid.uuid4().hex[:12], run_meta=json.dumps(meta, sort_keys=True),
                           pack_kb=64, lanes=1, segment_mb=1 << 20)
    last_step = 0
    try:
        for seq, (side, key, step, call) in enumerate(wanted(doc, dumps, window)):
            name = f"{side}/{key}"
            try:
                src = dumps[side].rows(key, step, call)[0]
                array = stored_form(dumps[side].array(key, step, call=call), src["dtype"])
            except Exception as e:  # noqa: BLE001 - a missing or stats-only key is listed, not fatal
                result.left_out.append(f"{name} ({str(e).splitlines()[0][:80]})")
                continue
            if array.nbytes > max_tensor_mb * (1 << 20):
                result.left_out.append(f"{name} ({array.nbytes / (1 << 20):.1f} MB > {max_tensor_mb} MB)")
                continue
            writer.add(_row(src, name, seq, array), array)
            result.keys.append(name)
            result.nbytes += array.nbytes
            last_step = max(last_step, step)
        writer.close(complete_through_step=last_step)
        produced = [n for n in os.listdir(tmp_dir) if schema.SEGMENT_RE.match(n)]
        if len(produced) > 1:
            raise DumpError(f"{path}: the writer produced {len(produced)} segment files where one was "
                            f"expected ({', '.join(sorted(produced))}); no slice written")
        if produced:
            os.replace(os.path.join(tmp_dir, produced[0]), path)
    finally:
        for n in os.listdir(tmp_dir):
            os.remove(os.path.join(tmp_dir, n))
        os.rmdir(tmp_dir)
    return result


def stored_form(array, dtype: str):
    """What the writer stores for an array read back with ``Dump.array()``: bf16 (read as its exact
    float32) goes back to its 2-byte bits (schema 3), so the slice's hashes equal the source's."""
    import numpy as np

    from inkling_probe.store.stats import float32_to_bf16_bits

    return float32_to_bf16_bits(array) if dtype == "bfloat16" and array.dtype == np.float32 else array


def _row(src: dict, name: str, seq: int, array) -> dict:
    return {"key": name, "step": src["step"], "seq": seq, "call": src["call"], "rank": 0,
            "shape": schema.shape_text(array.shape), "dtype": src["dtype"],
            "storage": "native" if src["dtype"] == "bfloat16" else src["storage"],  # bf16: its bits (stored_form)
            "shard": "replicated", "dim": schema.NO_DIM, "token_dim": src["token_dim"],
            "token_start": src["token_start"], "numel": int(array.size),
            "meta": json.dumps(src["meta"], sort_keys=True) if src.get("meta") else ""}

"""Global-view summaries of index rows: one row per (key, step, call), shards combined.

Concat shards combine exactly (counts, sums and maxima add up); replicated tensors take rank 0's
row; partial sums can't be summarised without reading them, so their stats are left empty. A
combined row has no hash (a hash of shards would not equal the unsharded tensor's).
"""
from __future__ import annotations

import math
from collections import defaultdict


def global_rows(index: list[dict], world_size: int) -> list[dict]:
    """Combine per-rank index rows into global rows, in execution order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in index:
        groups[(r["key"], r["step"], r["call"])].append(r)
    out = [_combine(sorted(rows, key=lambda r: r["rank"]), world_size) for rows in groups.values()]
    return sorted(out, key=lambda r: (r["step"], r["seq"]))


def _combine(rows: list[dict], world_size: int) -> dict:
    first = dict(rows[0])
    first["ranks"] = [r["rank"] for r in rows]
    first["incomplete"] = first["shard"] != "replicated" and len(rows) < world_size
    if first["shard"] == "replicated" or len(rows) == 1 or first["incomplete"]:
        return first  # one rank's shard when others did not record it: ls says so
    if first["shard"] != "concat":  # partial sums, or a foreign dump's undeclared layout (store/foreign)
        return {**first, "mean": math.nan, "rms": math.nan, "absmax": math.nan, "nan": -1, "inf": -1,
                "hash": ""}
    dim = first["dim"]
    shape = list(first["shape"])
    shape[dim] = sum(r["shape"][dim] for r in rows)
    finite = [r["numel"] - r["nan"] - r["inf"] for r in rows]
    n = sum(finite)
    mean = sum(r["mean"] * k for r, k in zip(rows, finite) if k) / n if n else math.nan
    rms = math.sqrt(sum(r["rms"] ** 2 * k for r, k in zip(rows, finite) if k) / n) if n else math.nan
    return {**first, "shape": tuple(shape), "shape_text": "x".join(map(str, shape)), "hash": "",
            "numel": sum(r["numel"] for r in rows), "mean": mean, "rms": rms,
            "absmax": max((r["absmax"] for r in rows if not math.isnan(r["absmax"])), default=math.nan),
            "nan": sum(r["nan"] for r in rows), "inf": sum(r["inf"] for r in rows)}

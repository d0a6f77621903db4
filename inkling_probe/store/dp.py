"""Attention-DP dumps read in the DP=1 global layout: every group's rows put back per request.

Under attention-DP each attention group runs its own requests. Its probes declare the layout in
their meta (``inkling_probe.step(dp_rank=, dp_size=, requests=)``): ``requests`` is
``[[request id, token rows], ...]`` in row order along the tensor's token dim; id -1 marks a padding
request an idle group ran to keep the collectives in step.

The reader merges, for each (key, step, call) and each position in the attention group, the rows of
all DP groups into one row whose tensor holds every request's token rows ordered by request id,
padding dropped: what a DP=1 run of the same requests records. A DP2xTP2 dump thus reads as a TP=2
dump of all requests, and compare aligns it with a DP=1 reference by key, step and token as usual.
Whatever can't be merged (a group missing, token rows that don't match the requests, a request
served twice) is named when the tensor is read, so listing never fails.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict

import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store import gaps, schema

PAD = -1


def is_dp(row: dict) -> bool:
    """True for an index row recorded under attention-DP (``dp_size`` > 1 in its meta)."""
    return int(row["meta"].get("dp_size", 1)) > 1


def global_rows(rows: list[dict]) -> tuple[list[dict], int, int | None]:
    """``rows`` with every DP tensor's rows merged per attention-group rank.

    Returns (rows, dp_size, attention group size); the sizes are (1, None) when no row is DP.
    """
    dp_rows = [r for r in rows if is_dp(r)]
    if not dp_rows:
        return rows, 1, None
    by_tensor: dict[tuple, list[dict]] = defaultdict(list)
    for r in dp_rows:
        by_tensor[(r["key"], r["step"], r["call"])].append(r)
    merged = [m for group in by_tensor.values() for m in _merge(group)]
    dp_size = max(int(r["meta"]["dp_size"]) for r in dp_rows)
    attn_size = max(m["rank"] for m in merged) + 1
    return [r for r in rows if not is_dp(r)] + merged, dp_size, attn_size


def _merge(rows: list[dict]) -> list[dict]:
    """One merged row per attention-group rank for one tensor's rows from every rank."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["rank"]):
        groups[int(r["meta"].get("dp_rank", 0))].append(r)
    dp_size = int(rows[0]["meta"]["dp_size"])
    holes = gaps.missing(groups, dp_size)  # found between the groups present: dp_size is untrusted
    missing = gaps.text(holes) if holes else ""
    width = max(len(g) for g in groups.values())
    out = []
    for a in range(width):
        parts = [groups[g][a] for g in sorted(groups) if a < len(groups[g])]
        error = f"attention-DP groups {missing} of {dp_size} did not record it" if missing else \
            ("" if len(parts) == len(groups) else f"attention rank {a} is missing in some DP group")
        out.append(_merged_row(parts, a, error))
    return out


def _merged_row(parts: list[dict], attn_rank: int, error: str) -> dict:
    first = parts[0]
    td = None if first["token_dim"] == schema.NO_DIM else first["token_dim"]
    requests = [req for p in parts for req in p["meta"].get("requests") or []]
    ids = [int(i) for i, _ in requests if int(i) != PAD]
    shape = list(first["shape"])
    error = error or _layout_error(parts, td, ids)
    if td is not None and not error:
        shape[td] = sum(int(n) for i, n in requests if int(i) != PAD)
    meta = {k: v for k, v in first["meta"].items() if k not in ("dp_rank", "requests")}
    meta["requests"] = sorted([int(i), int(n)] for i, n in requests if int(i) != PAD)
    row = {**first, "rank": attn_rank, "seq": min(p["seq"] for p in parts), "shape": tuple(shape),
           "shape_text": schema.shape_text(shape), "numel": math.prod(shape), "meta": meta,
           "hash": _hash(parts), "_parts": parts, "_dp_error": error}
    return {**row, **_stats(parts, padded=len(ids) != len(requests))}


def _layout_error(parts: list[dict], td: int | None, ids: list[int]) -> str:
    if len(set(ids)) != len(ids):
        return f"a request is served by two DP groups (request ids {sorted(ids)})"
    if td is None:
        return ""
    for p in parts:
        rows = sum(int(n) for _, n in p["meta"].get("requests") or [])
        if p["meta"].get("requests") is None:
            return f"rank {p['rank']} declares no requests (read it with rank=)"
        if p["shape"][td] != rows or p["token_start"]:
            return (f"rank {p['rank']} holds {p['shape'][td]} token rows from {p['token_start']} but its "
                    f"requests hold {rows} (a token slice can't be put back per request)")
        if [s for d, s in enumerate(p["shape"]) if d != td] != [s for d, s in enumerate(parts[0]["shape"]) if d != td]:
            return f"shapes {p['shape']} (rank {p['rank']}) and {parts[0]['shape']} differ beyond the token dim"
    return ""


def _hash(parts: list[dict]) -> str:
    """Equal for two merged rows whose parts are all equal (never equal to an unmerged row's hash)."""
    if not all(p["hash"] for p in parts):
        return ""
    text = "dp|" + "|".join(f"{p['hash']}:{p['meta'].get('requests')}" for p in parts)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _stats(parts: list[dict], padded: bool) -> dict:
    """Exact combined stats of the parts; empty when padding rows (dropped) would count."""
    if padded or any(p["nan"] < 0 for p in parts):
        return {"mean": math.nan, "rms": math.nan, "absmax": math.nan, "nan": -1, "inf": -1}
    finite = np.array([p["numel"] - p["nan"] - p["inf"] for p in parts], np.float64)
    n = finite.sum()
    w = finite / n if n else finite
    means = np.array([p["mean"] if k else 0.0 for p, k in zip(parts, finite)])
    rmss = np.array([p["rms"] if k else 0.0 for p, k in zip(parts, finite)])
    return {"mean": float(w @ means) if n else math.nan, "rms": math.sqrt(float(w @ rmss ** 2)) if n else math.nan,
            "absmax": float(np.nanmax([p["absmax"] for p in parts])), "nan": sum(p["nan"] for p in parts),
            "inf": sum(p["inf"] for p in parts)}


def is_merged(row: dict) -> bool:
    return "_parts" in row


def load(path: str, row: dict, load_raw) -> np.ndarray:
    """The merged row's array: each part's own request rows, ordered by request id, padding dropped."""
    if row["_dp_error"]:
        raise DumpError(f"{path}: key {row['key']!r} step {row['step']}: can't put the attention-DP "
                        f"groups back together: {row['_dp_error']}")
    parts = row["_parts"]
    td = None if row["token_dim"] == schema.NO_DIM else row["token_dim"]
    if td is None:  # no token rows: every group holds the same tensor; the first group's stands
        return load_raw(parts[0]).reshape(parts[0]["shape"])
    pieces = []
    for p in parts:
        array = load_raw(p).reshape(p["shape"])
        bounds = np.cumsum([int(n) for _, n in p["meta"]["requests"]])[:-1]
        for (rid, _), piece in zip(p["meta"]["requests"], np.split(array, bounds, axis=td)):
            if int(rid) != PAD:
                pieces.append((int(rid), piece))
    if not pieces:
        return np.zeros(row["shape"], load_raw(parts[0]).dtype)
    return np.concatenate([piece for _, piece in sorted(pieces, key=lambda x: x[0])], axis=td)

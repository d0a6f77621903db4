"""Replicated tensors must agree across ranks: a rank that disagrees is a finding of its own.

Hashes in the index decide first (no tensor is read when every rank's hash is equal); ranks
whose hash differs are loaded and measured against the lowest rank. A disagreement above the
key's dtype-default threshold counts as a divergence; smaller ones are reported as notes.
"""
from __future__ import annotations

from inkling_probe.compare.align import Entry
from inkling_probe.compare.metrics import compare_tensors
from inkling_probe.compare.values import Values
from inkling_probe.errors import ProbeError


def check_replicated(dump, entry: Entry, label: str, key: str, threshold: float) -> list[dict]:
    """Findings for ranks of a replicated ``entry`` that differ from its lowest rank."""
    rows = sorted(entry.rows, key=lambda r: r["rank"])
    if len(rows) < 2 or rows[0]["shard"] != "replicated":
        return []
    base = rows[0]
    odd = [r for r in rows[1:] if not (r["hash"] and r["hash"] == base["hash"])]
    if not odd:
        return []
    try:
        shards = {r["rank"]: Values(dump.array(entry.key, step=entry.step, rank=r["rank"], call=entry.call), r["dtype"])
                  for r in rows}
    except ProbeError as e:
        return [{"dump": label, "key": key, "step": entry.step, "ranks": [r["rank"] for r in odd],
                 "diverged": False, "note": f"could not read shards: {str(e).splitlines()[0]}"}]
    out = []
    ref = shards[base["rank"]]
    for r in odd:
        t = shards[r["rank"]]
        if t.array.shape != ref.array.shape:
            out.append({"dump": label, "key": key, "step": entry.step, "rank": r["rank"], "diverged": True,
                        "note": f"shape {list(t.array.shape)} vs rank {base['rank']}'s {list(ref.array.shape)}"})
            continue
        m = compare_tensors(ref, t)
        err = m.error("rel_rms")
        if m.exact:
            continue
        out.append({"dump": label, "key": key, "step": entry.step, "rank": r["rank"],
                    "against_rank": base["rank"], "diverged": err > threshold, "rel_rms": err,
                    "threshold": threshold, "metrics": m.to_dict(),
                    "note": f"rank {r['rank']} disagrees with rank {base['rank']} on a replicated tensor"})
    return out

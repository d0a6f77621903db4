"""What a ``bisect layers`` trial records besides its layer, so compare judges it as a full compare would.

compare judges a key with state built from the keys before it in execution order (compare/walker.py):
the tokens set aside after a routing change in an earlier layer, the layer depth (how many layers
were seen), and the coarsest float dtype seen so far. A trial that records one layer alone loses all
three: measured on the seed-3 tiny model, a benign TP=2 candidate's ``layers.3.attn_norm`` read 0.0596
alone and 0.0067 in the full compare on bit-identical tensors, and was flagged.

So each trial also records, from every earlier layer, the small keys that carry that state:

- the keys before the first layer (``embed`` ...), once;
- every integer key (routing decisions: top-k ids, and ids passed on) and every key declared a
  decision, with the router scores compare classifies it against: the key its meta names
  (``scores=``), else the nearest float keys before it in the same layer (compare looks at four);
- one key of each earlier layer that has none of these (the depth counts layers seen);
- one key of the coarsest float dtype seen before the layer, when the others lack it (the precision).

The carried keys are compared too, with the same bookkeeping as in the full compare (the control
records them alike, so their floors are the same), so a trial fails exactly when the full compare
has a divergence among the keys it holds. Everything is chosen from the stats runs' index rows:
names, dtypes, shapes, meta; the record of the tested layer's runs is what costs.
"""
from __future__ import annotations

import re

import numpy as np

from inkling_probe.compare.floor import coarsest, precision_rank

_LAYER = re.compile(r"^layers\.(\d+)\.")
SCORE_LOOKBACK = 4  # compare looks at this many float keys before a decision for its scores
RUNNING_EPS = 0.1  # dtypes finer than this carry precision forward (compare/floor.py: not fp8/fp4 scales)


def layer_of(key: str) -> int | None:
    m = _LAYER.match(key)
    return int(m.group(1)) if m else None


def index_rows(dump) -> list[dict]:
    """``[{"key", "dtype", "shape", "meta"}]``, one per key, in execution order (first occurrence)."""
    seen: dict[str, dict] = {}
    for r in sorted(dump.index, key=lambda r: (r.get("step", 0), r.get("seq", 0))):
        if r["key"] not in seen:
            seen[r["key"]] = {"key": r["key"], "dtype": str(r.get("dtype", "")), "shape": tuple(r.get("shape") or ()),
                              "meta": r.get("meta") or {}}
    return list(seen.values())


def _integer(dtype: str) -> bool:
    d = dtype.lower()
    return "int" in d or d.startswith("bool") or d in ("b1", "?")


def _size(row: dict) -> int:
    return int(np.prod(row["shape"])) if row["shape"] else 1


def carried(ref_rows: list[dict], cand_rows: list[dict], layer: int) -> list[str]:
    """The keys before ``layer`` that a trial of ``layer`` records besides its own (module docstring)."""
    cand = {r["key"]: r for r in cand_rows}
    before = [r for r in ref_rows if r["key"] in cand and (layer_of(r["key"]) is None or layer_of(r["key"]) < layer)]
    first = next((i for i, r in enumerate(ref_rows) if layer_of(r["key"]) is not None), len(ref_rows))
    head = {r["key"] for r in ref_rows[:first] if r["key"] in cand and layer_of(r["key"]) is None}
    out = [r["key"] for r in before if r["key"] in head]
    if layer <= min((layer_of(r["key"]) for r in ref_rows if layer_of(r["key"]) is not None), default=0):
        return out
    earlier = [r for r in before if layer_of(r["key"]) is not None]
    for r in earlier:
        if _is_decision(r, cand[r["key"]]):
            out += _with_scores(r, ref_rows, cand)
    out += _one_per_layer(earlier, out)
    out += _precision(earlier, cand, out)
    keep = set(out)
    return [r["key"] for r in before if r["key"] in keep]  # execution order, each once


def _is_decision(ref: dict, cand: dict) -> bool:
    return (_integer(ref["dtype"]) or _integer(cand["dtype"]) or ref["meta"].get("kind") == "decision"
            or cand["meta"].get("kind") == "decision")


def _with_scores(dec: dict, ref_rows: list[dict], cand: dict) -> list[str]:
    """The decision and the keys compare may read its router scores from."""
    out = [dec["key"]]
    named = dec["meta"].get("scores")
    if named:
        return out + ([named] if named in cand else [])
    i = next(j for j, r in enumerate(ref_rows) if r["key"] == dec["key"])
    looked = 0
    for r in reversed(ref_rows[:i]):
        if looked >= SCORE_LOOKBACK or layer_of(r["key"]) != layer_of(dec["key"]):
            break
        if _integer(r["dtype"]) or r["meta"].get("kind") == "decision":
            continue
        looked += 1
        if r["key"] in cand and not _integer(cand[r["key"]]["dtype"]):
            out.append(r["key"])
            if _scores_fit(r, cand[r["key"]], dec):
                break  # compare takes the first that fits
    return out


def _scores_fit(ref: dict, cand: dict, dec: dict) -> bool:
    """Same shape on both sides, one row per token of the decision (compare's test, by the index)."""
    rs, ds = [d for d in ref["shape"] if d != 1], [d for d in dec["shape"] if d != 1]
    return ref["shape"] == cand["shape"] and bool(rs) and bool(ds) and rs[0] == ds[0]


def _one_per_layer(earlier: list[dict], chosen: list[str]) -> list[str]:
    have = {layer_of(k) for k in chosen}
    out = []
    for lay in sorted({layer_of(r["key"]) for r in earlier} - have):
        rows = [r for r in earlier if layer_of(r["key"]) == lay]
        out.append(min(rows, key=_size)["key"])
    return out


def _precision(earlier: list[dict], cand: dict, chosen: list[str]) -> list[str]:
    def running(r):
        return [d for d in (r["dtype"], cand[r["key"]]["dtype"]) if 0 < precision_rank(d) < RUNNING_EPS]

    want = coarsest(*(d for r in earlier for d in running(r)))
    keys = set(chosen)
    have = coarsest(*(d for r in earlier if r["key"] in keys for d in running(r)))
    if want is None or (have is not None and precision_rank(have) >= precision_rank(want)):
        return []
    rows = [r for r in earlier if want in running(r)]
    return [min(rows, key=_size)["key"]]


def include_globs(keys: list[str]) -> list[str]:
    """Exact-name globs for ``INKLING_PROBE_INCLUDE`` (metacharacters escaped; a name holding a comma,
    which the variable cannot carry, is left out)."""
    return [re.sub(r"([*?\[])", r"[\1]", k) for k in keys if "," not in k]

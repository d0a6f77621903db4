"""``bisect elements``: where two tensors (dumps or checkpoint weights) differ, bit for bit.

Each tensor is split recursively along its natural units: expert (dim 0 of a 3-d experts tensor; each
element of a 1-d one, e.g. ``input_scale [E]``),
row blocks of 16 rows, then 16-element NVFP4 blocks along the last dim (a block-scale tensor's
elements are blocks already). Units with no difference are dropped at once; neighbours whose
insides differ alike merge into ranges. The answer counts elements: "0 of N elements diverged".
"""
from __future__ import annotations

import fnmatch

import numpy as np

from inkling_probe.bisect.sources import open_source

ROWS = 16
BLOCK = 16


def levels(key: str, shape: tuple, scale: bool) -> list[tuple[str, int, int]]:
    """``(unit name, dim, size)`` from the outermost unit in."""
    width = 1 if scale else BLOCK
    if len(shape) == 0:
        return []
    if len(shape) == 1 and "experts" in key:  # one value per expert (input_scale, weight_scale2 [E])
        return [("expert", 0, 1)]
    outer = [("expert" if "experts" in key and len(shape) == 3 else f"dim{d}", d, 1) for d in range(len(shape) - 2)]
    rows = [("rows", len(shape) - 2, ROWS)] if len(shape) >= 2 else []
    return outer + rows + [("blocks" if width > 1 or scale else "elements", len(shape) - 1, width)]


def split(mask: np.ndarray, lv: list, origin: tuple = ()) -> list[dict]:
    """Regions holding differences: ``{"unit", "start", "stop", "diverged", "of", "inside"}``."""
    if not lv:
        return []
    name, dim, size = lv[0]
    n = mask.shape[dim]
    out: list[dict] = []
    for start in range(0, n, size):
        part = _take(mask, dim, start, min(start + size, n))
        count = int(part.sum())
        if not count:
            continue
        region = {"unit": name, "start": start, "stop": min(start + size, n), "size": size, "diverged": count,
                  "of": int(part.size), "inside": split(part, lv[1:])}
        if out and _mergeable(out[-1], region):
            out[-1] = {**out[-1], "stop": region["stop"], "diverged": out[-1]["diverged"] + count,
                       "of": out[-1]["of"] + region["of"]}
        else:
            out.append(region)
    return out


def _take(a: np.ndarray, dim: int, start: int, stop: int) -> np.ndarray:
    index = [slice(None)] * a.ndim
    index[dim] = slice(start, stop)
    return a[tuple(index)]


def _mergeable(prev: dict, region: dict) -> bool:
    return prev["stop"] == region["start"] and _shape_of(prev["inside"]) == _shape_of(region["inside"])


def _shape_of(regions: list[dict]):
    return [(r["unit"], r["start"], r["stop"], r["diverged"] == r["of"], _shape_of(r["inside"])) for r in regions]


def compare_key(a, b, key: str) -> dict:
    """One key's verdict: element counts and the regions that differ."""
    x, y = a.bits(key), b.bits(key)
    packed = a.packed_fp4(key)
    row = {"key": key, "dtype": a.dtype(key), "shape": list(x.shape), "nvfp4_codes": packed,
           "elements": int(x.size), "diverged": 0, "regions": []}
    if x.shape != y.shape or a.dtype(key) != b.dtype(key):
        row.update(diverged=int(x.size), mismatch=f"{a.dtype(key)}{list(x.shape)} vs {b.dtype(key)}{list(y.shape)}")
        return row
    mask = np.asarray(x != y)
    row["diverged"] = int(mask.sum())
    if row["diverged"]:
        dt = a.dtype(key)
        scale = key.endswith("_scale") and ("F8" in dt.upper() or "float8" in dt)  # one element per block
        row["regions"] = split(mask, levels(key, x.shape, scale))
    return row


def bisect_elements(path_a: str, path_b: str, keys: str | None = None, step: int = 0, progress=None) -> dict:
    """Compare every common key (or those matching ``keys`` globs) of two dumps or checkpoints."""
    a, b = open_source(path_a, step), open_source(path_b, step)
    globs = [g.strip() for g in keys.split(",")] if keys else None
    names_a, names_b = a.keys(), set(b.keys())
    chosen = [k for k in names_a if k in names_b and (globs is None or any(fnmatch.fnmatchcase(k, g) for g in globs))]
    if not chosen:
        from inkling_probe.bisect.sources import BadSource
        raise BadSource(f"no common key{' matching ' + keys if keys else ''} in {path_a} and {path_b}")
    rows = []
    for i, k in enumerate(chosen):
        rows.append(compare_key(a, b, k))
        if progress:
            progress("key", {"done": i + 1, "total": len(chosen), "key": k})
    return {"elements": sum(r["elements"] for r in rows), "diverged": sum(r["diverged"] for r in rows),
            "keys": len(rows), "diverged_keys": [r for r in rows if r["diverged"]],
            "only_a": sorted(set(names_a) - names_b)[:50] if globs is None else [],
            "only_b": sorted(names_b - set(names_a))[:50] if globs is None else []}


def describe(region: dict) -> str:
    """``expert 5``, ``rows 0-15``, ``blocks 2-3 (elements 32-63)``."""
    unit, a, b, size = region["unit"], region["start"], region["stop"], region["size"]
    span = str(a) if b == a + 1 else f"{a}-{b - 1}"
    if unit == "blocks" and size > 1:
        blocks = str(a // size) if b - a <= size else f"{a // size}-{(b - 1) // size}"
        return f"blocks {blocks} (elements {span})"
    return f"{unit} {span}"


def region_lines(regions: list[dict], depth: int = 0, limit: int = 12) -> list[str]:
    """Indented text lines of a region tree, at most ``limit`` siblings each."""
    lines = []
    for r in regions[:limit]:
        lines.append(f"{'  ' * depth}{describe(r)}: {r['diverged']} of {r['of']}")
        lines += region_lines(r["inside"], depth + 1, limit)
    if len(regions) > limit:
        lines.append(f"{'  ' * depth}... {len(regions) - limit} more")
    return lines

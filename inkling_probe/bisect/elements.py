"""``bisect elements``: where two tensors (dumps or checkpoint weights) differ, bit for bit.

Each tensor is split recursively along its natural units: expert (dim 0 of a 3-d experts tensor; each
element of a 1-d one, e.g. ``input_scale [E]``),
row blocks of 16 rows, then 16-element NVFP4 blocks along the last dim (a block-scale tensor's
elements are blocks already). Units with no difference are dropped at once; neighbours whose
insides differ alike merge into ranges. The answer counts elements: "0 of N elements diverged".

A dump that records its media layout (``fused``'s meta ``media``, docs/MULTIMODAL.md) splits the
token rows by modality first (:func:`media_parts`): a key whose token dim spans the fused stream
splits into ``image i`` / ``audio i`` spans (then ``patches`` / ``frames``, one row each, counted
from the item's first row) and ``text`` runs (then row blocks); a tower key (``vision.*``,
``audio.*``) whose dim 0 holds the tower's rows splits into its items, then patches / frames.
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


def media_parts(key: str, shape: tuple, token_dim, spans: list, n: int) -> tuple[int, list] | None:
    """``(dim, parts)`` splitting ``key``'s rows by modality, or None: parts are ``(label, start, stop,
    inner unit, inner size)`` in row order (``spans``: the media layout, ``n``: the fused stream's rows)."""
    from inkling_probe.compare.modality import tower_kind

    kind = tower_kind(key)
    if kind is not None:  # tower rows: the modality's items back to back
        mine = [s for s in spans if s[0] == kind]
        if not shape or shape[0] != sum(s[3] for s in mine):
            return None
        unit, out, at = ("patches" if kind == "image" else "frames"), [], 0
        for s in mine:
            out.append((f"{kind} {s[1]}", at, at + s[3], unit, 1))
            at += s[3]
        return 0, out
    if token_dim is None or not 0 <= token_dim < len(shape) or shape[token_dim] != n or not spans:
        return None
    out, at = [], 0
    for s in sorted(spans, key=lambda s: s[2]):
        if s[2] > at:
            out.append(("text", at, s[2], "rows", ROWS))
        out.append((f"{s[0]} {s[1]}", s[2], s[2] + s[3], "patches" if s[0] == "image" else "frames", 1))
        at = s[2] + s[3]
    if at < n:
        out.append(("text", at, n, "rows", ROWS))
    return token_dim, out


def with_media(lv: list, dim: int, parts: list) -> list:
    """``levels`` with the unit along ``dim`` replaced by the modality parts (outermost)."""
    return [("media", dim, parts)] + [u for u in lv if u[1] != dim]


def split(mask: np.ndarray, lv: list, origin: tuple = ()) -> list[dict]:
    """Regions holding differences: ``{"unit", "start", "stop", "diverged", "of", "inside"}``."""
    if not lv:
        return []
    name, dim, size = lv[0]
    if not isinstance(size, int):
        return _split_parts(mask, dim, size, lv[1:])
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


def _split_parts(mask: np.ndarray, dim: int, parts: list, rest: list) -> list[dict]:
    """One region per part holding differences; inside, the part's own unit (numbered from its start)."""
    out = []
    for label, start, stop, unit, size in parts:
        part = _take(mask, dim, start, stop)
        count = int(part.sum())
        if count:
            inside = split(part, [(unit, dim, size)] + rest)
            if unit == "rows":  # text row blocks keep the stream's row numbers (patches / frames count from 0)
                inside = [{**r, "start": r["start"] + start, "stop": r["stop"] + start} for r in inside]
            out.append({"unit": label, "start": start, "stop": stop, "size": stop - start, "diverged": count,
                        "of": int(part.size), "inside": inside})
    return out


def _take(a: np.ndarray, dim: int, start: int, stop: int) -> np.ndarray:
    index = [slice(None)] * a.ndim
    index[dim] = slice(start, stop)
    return a[tuple(index)]


def _mergeable(prev: dict, region: dict) -> bool:
    return prev["stop"] == region["start"] and _shape_of(prev["inside"]) == _shape_of(region["inside"])


def _shape_of(regions: list[dict]):
    return [(r["unit"], r["start"], r["stop"], r["diverged"] == r["of"], _shape_of(r["inside"])) for r in regions]


def compare_key(a, b, key: str, media: tuple | None = None) -> dict:
    """One key's verdict: element counts and the regions that differ (``media``: ``(spans, rows)`` of
    the dump's media layout, to split token rows by modality)."""
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
        lv = levels(key, x.shape, scale)
        got = media_parts(key, x.shape, a.token_dim(key), *media) if media and hasattr(a, "token_dim") else None
        row["regions"] = split(mask, with_media(lv, *got) if got else lv)
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
    media = (a.media() or b.media()) if hasattr(a, "media") and hasattr(b, "media") else None
    rows = []
    for i, k in enumerate(chosen):
        rows.append(compare_key(a, b, k, media))
        if progress:
            progress("key", {"done": i + 1, "total": len(chosen), "key": k})
    return {"elements": sum(r["elements"] for r in rows), "diverged": sum(r["diverged"] for r in rows),
            "keys": len(rows), "diverged_keys": [r for r in rows if r["diverged"]],
            "only_a": sorted(set(names_a) - names_b)[:50] if globs is None else [],
            "only_b": sorted(names_b - set(names_a))[:50] if globs is None else []}


def describe(region: dict) -> str:
    """``expert 5``, ``rows 0-15``, ``blocks 2-3 (elements 32-63)``, ``image 0 (rows 3-14)``."""
    unit, a, b, size = region["unit"], region["start"], region["stop"], region["size"]
    span = str(a) if b == a + 1 else f"{a}-{b - 1}"
    if unit == "text" or unit.startswith(("image ", "audio ")):
        return f"{unit} (rows {span})"
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

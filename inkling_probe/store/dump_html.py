"""The notebook view of an open dump (``Dump._repr_html_``): a heading with the run, then one table
row per key: steps, calls, ranks, dtype, shape and bytes. Read from the index only (kilobytes)."""
from __future__ import annotations

from collections import defaultdict
from html import escape

LIMIT = 40  # keys shown; the rest are counted
# bytes per element of each recorded dtype (the model's, not the stored form): no torch on the read side
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
            "float4_e2m1fn_x2": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def dump_html(dump, limit: int = LIMIT) -> str:
    """HTML for ``dump`` (a :class:`~inkling_probe.store.dump.Dump`)."""
    keys = _by_key(dump.index)
    total = sum(k["bytes"] for k in keys.values())
    steps = sorted({s for k in keys.values() for s in k["steps"]})
    head = (f"<p><b>{escape(dump.path)}</b>: {len(keys)} keys, {sum(k['tensors'] for k in keys.values())} "
            f"tensors, steps {escape(_span(steps))}, ranks {escape(_span(dump.ranks))} of {dump.world_size}, "
            f"{_size(total)}</p>")
    cells = ("key", "steps", "calls", "ranks", "dtype", "shape", "size")
    rows = [f"<tr>{''.join(f'<td>{escape(str(v))}</td>' for v in _cells(name, k))}</tr>"
            for name, k in list(keys.items())[:limit]]
    more = len(keys) - limit
    tail = f'<tr><td colspan="{len(cells)}">... {more} more keys</td></tr>' if more > 0 else ""
    header = "".join(f"<th>{c}</th>" for c in cells)
    return (f"<div>{head}<table><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}{tail}</tbody>"
            "</table></div>")


def _by_key(index: list[dict]) -> dict:
    keys: dict = defaultdict(lambda: {"steps": set(), "calls": 0, "ranks": set(), "dtypes": set(),
                                      "shapes": set(), "bytes": 0, "tensors": 0})
    for r in index:
        k = keys[r["key"]]
        k["steps"].add(r["step"])
        k["calls"] = max(k["calls"], r["call"] + 1)
        k["ranks"].add(r["rank"])
        k["dtypes"].add(r["dtype"])
        k["shapes"].add(tuple(r["shape"]))
        k["bytes"] += _nbytes(r)
        k["tensors"] += 1
    return dict(keys)


def _nbytes(row: dict) -> int:
    return int(row["numel"]) * ITEMSIZE.get(row["dtype"], 0)


def _cells(name: str, k: dict) -> list:
    shapes = sorted(k["shapes"])
    shape = "x".join(map(str, shapes[0])) + (f" (+{len(shapes) - 1} more)" if len(shapes) > 1 else "")
    return [name, _span(sorted(k["steps"])), k["calls"], _span(sorted(k["ranks"])), "/".join(sorted(k["dtypes"])),
            shape or "scalar", _size(k["bytes"])]


def _span(values: list[int]) -> str:
    """``0-3``, ``0, 2, 5``, ``-``."""
    if not values:
        return "-"
    if values == list(range(values[0], values[-1] + 1)):
        return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"
    return ", ".join(map(str, values[:8])) + (" ..." if len(values) > 8 else "")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

"""How values are written out: :func:`fmt` for people, JSON without NaN/Inf for machines.

Every view, the bundle and the CLI write numbers and documents through these, so a saved
``compare --json`` and a bundle's summary.json are the same JSON.
"""
from __future__ import annotations

import json
import math
import os
import sys


def fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def finite_or_none(x):
    """JSON has no NaN/Inf: map them to None."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def sanitize(obj):
    """``obj`` with every NaN and Inf float (in nested dicts, lists and tuples) made None."""
    if isinstance(obj, float):
        return finite_or_none(obj)
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def json_default(v):
    """``json.dumps`` ``default=``: numpy scalars as numbers, sets and tuples as lists."""
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, (set, tuple)):
        return list(v)
    raise TypeError(f"not JSON-serialisable: {type(v).__name__}")


def to_json(obj, **kwargs) -> str:
    """``obj`` as strict JSON: NaN and Inf become null, numpy scalars numbers."""
    return json.dumps(sanitize(obj), default=json_default, allow_nan=False, **kwargs)


def output_width() -> int:
    """``COLUMNS`` when it is a positive number, else the terminal's width, else 160."""
    text = os.environ.get("COLUMNS", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 160
    except (OSError, ValueError):
        return 160

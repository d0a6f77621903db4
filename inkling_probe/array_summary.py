"""Value statistics, histograms and slice parsing for one stored array (numpy only: ``show`` reads
dumps without importing torch)."""
from __future__ import annotations

import numpy as np

_NAN_STATS = {"mean": float("nan"), "std": float("nan"), "rms": float("nan"), "min": float("nan"),
              "max": float("nan"), "absmax": float("nan")}


def value_stats(a: np.ndarray) -> dict:
    """numel, mean, std, rms, min, max, absmax, zeros, nan, inf, in float64 over finite values."""
    x = np.asarray(a).reshape(-1).astype(np.float64)
    finite = x[np.isfinite(x)]
    out = {"numel": int(x.size), "nan": int(np.isnan(x).sum()), "inf": int(np.isinf(x).sum()),
           "zeros": int((x == 0).sum())}
    if finite.size == 0:
        return {**out, **_NAN_STATS}
    return {**out, "mean": float(finite.mean()), "std": float(finite.std()),
            "rms": float(np.sqrt(np.mean(finite * finite))), "min": float(finite.min()),
            "max": float(finite.max()), "absmax": float(np.abs(finite).max())}


def histogram(a: np.ndarray, bins: int = 24) -> dict:
    """Equal-width histogram of the finite values: {'edges': [...], 'counts': [...]}."""
    if bins < 1:
        raise ValueError(f"bins={bins}: expected at least 1")
    x = np.asarray(a).reshape(-1).astype(np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"edges": [], "counts": []}
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        return {"edges": [lo, hi], "counts": [int(x.size)]}
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def parse_slice(text: str, ndim: int) -> tuple:
    """'0:4,:8,3' -> (slice(0, 4), slice(None, 8), 3) for indexing; at most ``ndim`` parts."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > ndim:
        raise ValueError(f"{len(parts)} indices for a {ndim}-dim tensor")
    out = []
    for p in parts:
        if ":" in p:
            bits = p.split(":")
            if len(bits) > 3:
                raise ValueError(f"bad slice part {p!r}")
            out.append(slice(*(int(b) if b.strip() else None for b in bits)))
        else:
            out.append(int(p))
    return tuple(out)

"""Value statistics, histograms and slice parsing for one tensor (used by ``show`` and reports)."""
from __future__ import annotations

import torch

from inkling_probe.array_summary import parse_slice  # noqa: F401 - one definition, numpy only


def value_stats(t: torch.Tensor) -> dict:
    """numel, mean, std, rms, min, max, absmax, zeros, nan, inf, in float64 over finite values."""
    x = t.detach().reshape(-1).double() if t.numel() else torch.zeros(0, dtype=torch.float64)
    finite = x[torch.isfinite(x)]
    n = finite.numel()
    out = {"numel": t.numel(), "nan": int(torch.isnan(x).sum()), "inf": int(torch.isinf(x).sum()),
           "zeros": int((x == 0).sum())}
    if n == 0:
        return {**out, "mean": float("nan"), "std": float("nan"), "rms": float("nan"),
                "min": float("nan"), "max": float("nan"), "absmax": float("nan")}
    return {**out, "mean": finite.mean().item(), "std": finite.std(unbiased=False).item(),
            "rms": finite.square().mean().sqrt().item(), "min": finite.min().item(),
            "max": finite.max().item(), "absmax": finite.abs().max().item()}


def histogram(t: torch.Tensor, bins: int = 24) -> dict:
    """Equal-width histogram of the finite values: {'edges': [...], 'counts': [...]}."""
    x = t.detach().reshape(-1).double()
    x = x[torch.isfinite(x)]
    if x.numel() == 0:
        return {"edges": [], "counts": []}
    lo, hi = x.min().item(), x.max().item()
    if lo == hi:
        return {"edges": [lo, hi], "counts": [x.numel()]}
    counts = torch.histc(x, bins=bins, min=lo, max=hi)
    step = (hi - lo) / bins
    return {"edges": [lo + i * step for i in range(bins + 1)], "counts": [int(c) for c in counts.tolist()]}

"""How much error is expected per key: the noise floor and the divergence threshold.

With a control dump (a second reference differing from the reference only in a benign factor:
fp32 vs bf16, TP=1 vs TP=2, batch 1 vs 8) the floor of a key is the control's error against the
reference, and a candidate key diverges where its error exceeds ``max(threshold, K * floor)``
(``K = 2`` by default). A benign candidate differs from the reference the way the control does,
so its error sits near 1x the floor (measured: NVFP4 at TP=2 against a TP=1 NVFP4 control, see
docs/COMPARE.md); 2x leaves room for fluctuation and a second benign factor. The raw-input_amax
bug stands at 3x on the tiny random model (0.74 vs 0.25) and 7.8x on the production model (0.62 vs
0.08): K = 4 would miss the first.

Without a control (and for keys the control lacks) the threshold is a dtype-aware default:

    threshold = BASE[precision] * sqrt(1 + depth)          (metric rel_rms)

- ``precision`` is the coarsest float dtype seen so far in execution order on either side: once
  bf16 enters, everything downstream carries bf16 noise, even tensors recorded in fp32.
- ``BASE`` is 4 x the dtype's machine epsilon (bf16: 0.031, fp16: 0.0039), but at least 1e-5 for
  fp32 (different kernels and reduction orders) and 1e-12 for fp64.
- ``depth`` is the layer position (0 before the first layer, i + 1 in the (i+1)-th layer seen,
  one more after the last): rounding error compounds through layers, roughly like a random walk.

On transformers' Inkling (tiny, random weights) bf16 vs fp32 gives rel_rms 0.003-0.012 on every
key once routing flips are set aside (error.py), under these thresholds by 3x or more.
Integer keys (top-k indices) diverge when the fraction of token rows that changed exceeds the same
threshold; other metrics scale it as in :func:`default_threshold`.
"""
from __future__ import annotations

import math

import torch

from inkling_probe.store.dtypes import FP4X2

K_DEFAULT = 2.0
_MIN_BASE = {torch.float64: 1e-12, torch.float32: 1e-5}


def precision_rank(dtype: torch.dtype) -> float:
    """The dtype's epsilon (larger = coarser); 0 for non-floats."""
    if dtype is FP4X2:
        return 0.5
    if not dtype.is_floating_point:
        return 0.0
    return float(torch.finfo(dtype).eps)


def coarsest(*dtypes: torch.dtype | None) -> torch.dtype | None:
    """The float dtype with the largest epsilon among ``dtypes`` (None when there is none)."""
    floats = [d for d in dtypes if d is not None and precision_rank(d) > 0]
    return max(floats, key=precision_rank) if floats else None


def base_threshold(precision: torch.dtype | None) -> float:
    """BASE[precision] of the module docstring (fp32's when no float has been seen)."""
    dtype = precision or torch.float32
    eps = precision_rank(dtype)
    return min(max(4.0 * eps, _MIN_BASE.get(dtype, 0.0)), 0.5)


def default_threshold(precision: torch.dtype | None, depth: int, metric: str = "rel_rms") -> float:
    """The no-control threshold of a key at ``depth`` whose upstream precision is ``precision``."""
    t = base_threshold(precision) * math.sqrt(1 + max(depth, 0))
    if metric in ("rel_rms", "mismatch", "outside"):
        return t
    if metric == "cosine":  # 1 - cos ~ rel_rms^2 / 2 for small errors
        return t * t / 2
    if metric == "max_rel":  # a max over many elements sits a few rms above the rms
        return 8 * t
    raise ValueError(f"metric {metric!r} has no dtype default: pass --threshold (or a --control)")


def threshold(floor: float | None, default: float, user: float | None, k: float = K_DEFAULT) -> float:
    """max(threshold, K * floor): ``user`` replaces the dtype default when given."""
    base = user if user is not None else default
    if floor is None or not math.isfinite(floor):
        return base
    return max(base, k * floor)

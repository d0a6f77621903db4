"""How much error is expected per key: the noise floor and the divergence allowance.

With a control dump (a second reference differing from the reference only in a benign factor:
fp32 vs bf16, TP=1 vs TP=2, batch 1 vs 8) the floor of a key is the control's error against the
reference, and the allowance is evidence alone:

    allowance = max(K * floor, MIN_ABS[precision])        (K = 2)

A benign candidate differs from the reference the way the control does, so its error sits near
1x the floor; 2x leaves room for fluctuation and a second benign factor. ``MIN_ABS`` is a small
absolute minimum (the fp32 default below). Where the control is bit-identical to the reference
(floor 0: e.g. the layers before the first quantized one) it measured nothing, and the dtype
default applies there.

Without a control (and for keys the control lacks) the allowance is a dtype-aware default:

    allowance = BASE[precision] * sqrt(1 + depth)          (metric rel_rms)

- ``precision`` is the coarsest float dtype seen so far in execution order on either side: once
  bf16 enters, everything downstream carries bf16 noise, even tensors recorded in fp32.
- ``BASE`` is 4 x the dtype's machine epsilon (bf16: 0.031, fp16: 0.0039), but at least 1e-5 for
  fp32 (different kernels and reduction orders) and 1e-12 for fp64.
- ``depth`` is the layer position (0 before the first layer, i + 1 in the (i+1)-th layer seen):
  rounding error compounds through layers, roughly like a random walk.

Measured benign pairs and their margins are in docs/COMPARE.md. Dtypes are handled by name, so
nothing here needs torch.
"""
from __future__ import annotations

import math

K_DEFAULT = 2.0
EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7,
       "float8_e4m3fn": 2.0 ** -3, "float8_e4m3fnuz": 2.0 ** -3, "float8_e5m2": 2.0 ** -2,
       "float8_e5m2fnuz": 2.0 ** -2, "float8_e8m0fnu": 1.0, "float4_e2m1fn_x2": 0.5}
_MIN_BASE = {"float64": 1e-12, "float32": 1e-5}


def _name(dtype) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def precision_rank(dtype) -> float:
    """The dtype's epsilon (larger = coarser); 0 for non-floats. ``dtype``: a name (or torch dtype)."""
    return EPS.get(_name(dtype), 0.0)


def coarsest(*dtypes) -> str | None:
    """The float dtype name with the largest epsilon among ``dtypes`` (None when there is none)."""
    floats = [_name(d) for d in dtypes if d is not None and precision_rank(d) > 0]
    return max(floats, key=precision_rank) if floats else None


def base_threshold(precision) -> float:
    """BASE[precision] of the module docstring (fp32's when no float has been seen)."""
    name = _name(precision) or "float32"
    return min(max(4.0 * precision_rank(name), _MIN_BASE.get(name, 0.0)), 0.5)


def default_threshold(precision, depth: int, metric: str = "rel_rms") -> float:
    """The no-control allowance of a key at ``depth`` whose upstream precision is ``precision``."""
    t = base_threshold(precision) * math.sqrt(1 + max(depth, 0))
    if metric in ("rel_rms", "mismatch", "outside"):
        return t
    if metric == "cosine":  # 1 - cos ~ rel_rms^2 / 2 for small errors
        return t * t / 2
    if metric == "max_rel":  # a max over many elements sits a few rms above the rms
        return 8 * t
    raise ValueError(f"metric {metric!r} has no dtype default: pass --threshold (or a --control)")


def min_allowance(depth: int, metric: str = "rel_rms") -> float:
    """The absolute minimum under a control: the fp32 default at ``depth``."""
    if metric == "max_abs":
        return 0.0
    return default_threshold("float32", depth, metric)


def threshold(floor: float | None, default: float, user: float | None, k: float = K_DEFAULT,
              minimum: float = 0.0) -> float:
    """The allowance of one key.

    - ``user`` given: it replaces every default (``max(user, K * floor)`` with a control);
    - a control floor: ``max(K * floor, minimum)``;
    - a control that is bit-identical to the reference at the key (floor 0) measures no noise at
      all, so it says nothing of the candidate's other benign factors: the dtype ``default``;
    - no control: the dtype ``default``.
    """
    has_floor = floor is not None and math.isfinite(floor) and floor > 0
    if user is not None:
        return max(user, k * floor) if has_floor else user
    if has_floor:
        return max(k * floor, minimum)
    return default

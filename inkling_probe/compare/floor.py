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


ROUNDING_K = 2.0


def min_allowance(depth: int, metric: str = "rel_rms", dtypes=()) -> float:
    """The absolute minimum under a control: the fp32 default at ``depth``, and at least ROUNDING_K x
    the rms of rounding to the coarsest of ``dtypes`` ((eps / 2) / sqrt(3) relative: bf16 2 x 0.0023
    = 0.0045): the key's own dtypes and the precision its inputs ran in (the walker passes the
    upstream precision: an fp32 softmax of bf16 logits carries their rounding). A tensor of a few
    dozen values is rounded differently on each side, and one control's error there is too small a
    sample to set the allowance alone (Mixtral's 2 top-k router weights at a decode step: a control
    error of 0.0005 against a candidate's 0.004 from bf16 logits named them a culprit)."""
    if metric == "max_abs":
        return 0.0
    base = default_threshold("float32", depth, metric)
    if metric != "rel_rms":
        return base
    return max(base, rounding_allowance(dtypes))


def row_allowance(n: int, base: float, k: float, k_row: float, ctl_rows=None, ctl_masked=(), minimum: float = 0.0,
                  rounding: float = 0.0, scale=None):
    """The allowance of each of ``n`` token rows, for row errors ``e_i`` (``measure.row_errors``: a row's
    error over an average row's norm). Rows fluctuate more than tensors, hence ``k_row`` (3) x:

    - without the control's rows: ``base`` (the key's allowance);
    - with them (``ctl_rows`` [n], ``ctl_masked`` the rows the control set aside):
      ``max(k/2 * own_i, base / k, minimum)``, where ``own_i`` is the control's error on row i, but
      never less than the control's distribution over rows: its row errors relative to their own
      rows' norms (``e_ctl_j / rho_j``), rms over the rows it judged and found different, applied to
      row i's norm (``rho_i``). A control row that happens to be exact, or that the control set aside
      after its own routing change, measured nothing about that row; it cannot make the row's
      allowance 0 (nor the average row's when the row is ten times louder);
    - either way at least ``rounding * rho_i``: the rounding of the key's own dtype (``rounding``:
      ROUNDING_K x its rms, relative) on that row's own scale.

    ``scale`` holds ``rho_i`` (``measure.row_errors_and_scale``); None: every row average (1).
    """
    import numpy as np

    rho = np.ones(n) if scale is None else np.asarray(scale, dtype=np.float64)  # [n]
    if ctl_rows is None:
        return np.maximum(np.full(n, k_row * base), k_row * rounding * rho)
    e = np.asarray(ctl_rows, dtype=np.float64)  # [n]
    judged = np.ones(e.shape, bool)
    if len(ctl_masked):
        judged[np.asarray(list(ctl_masked), dtype=np.int64)] = False
    seen = judged & (e > 0) & (rho > 0)
    spread = float(np.sqrt(np.mean((e[seen] / rho[seen]) ** 2))) if seen.any() else 0.0  # relative to own row
    own = np.where(judged, np.maximum(e, spread * rho), spread * rho)  # [n]
    allow = k_row * np.maximum(np.maximum(k / 2 * own, base / k), minimum)
    return np.maximum(allow, k_row * rounding * rho)


def rounding_allowance(dtypes) -> float:
    """ROUNDING_K x the rms of rounding to the coarsest of ``dtypes``, relative ((eps / 2) / sqrt(3);
    bf16: 0.0045); 0 for none."""
    own = coarsest(*dtypes)
    return ROUNDING_K * precision_rank(own) / 2 / math.sqrt(3) if own is not None else 0.0


def threshold(floor: float | None, default: float, user: float | None, k: float = K_DEFAULT,
              minimum: float = 0.0, *, decision: bool = False) -> float:
    """The allowance of one key: the one threshold rule every row kind uses (compare/judge.py).

    - ``user`` given: it replaces every default (``max(user, K * floor)`` with a control);
    - a control floor: ``max(K * floor, minimum)``;
    - a control that is bit-identical to the reference at the key (floor 0) measures no noise at
      all, so it says nothing of the candidate's other benign factors: the dtype ``default``;
    - no control: the dtype ``default``.

    ``decision``: the key is a decision (its error a changed-token fraction). Decisions are discrete:
    a control that changed none measured that none is expected (floor 0 is evidence: allowance 0),
    and a user threshold is in the metric's units, not a fraction: with a control's fraction it
    does not apply.
    """
    measured = floor is not None and math.isfinite(floor) and (floor > 0 or (decision and floor == 0))
    if decision and measured:
        user = None
    if user is not None:
        return max(user, k * floor) if measured else user
    if measured:
        return max(k * floor, minimum)
    return default

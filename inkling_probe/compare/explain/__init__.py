"""Explain a diverged pair: test the hypotheses of DESIGN.md part 4 and return those that hold.

Each hypothesis returns evidence (numbers) and holds only when it explains the difference: after
undoing the ratio, offset, rounding, permutation, shift or clamp the residual error is at the noise
level, or the zeroed / flushed / non-finite / confined positions carry the error. A pair that
agrees within ``noise`` has nothing to explain (an empty list).

numpy only (no torch import). The cost is bounded: one float64 pass collects the sums that decide
the ratios, offsets and confinement; every transform is tried on a deterministic sample first and
verified on the whole only when the sample says it holds; blocks are converted to float64 a few
MiB at a time (scripts/bench_explain.py measures time and memory against the metrics of the pair).

    from inkling_probe.compare import explain
    explain.explain(ref, cand, noise=0.03, token_dim=0)  # -> [Finding(...), ...]
"""
from __future__ import annotations

import dataclasses

import numpy as np

from inkling_probe.compare.explain.base import KINDS, Context, Finding, as_values, unpack_fp4
from inkling_probe.compare.explain.confined import confined
from inkling_probe.compare.explain.dtypes import default_noise
from inkling_probe.compare.explain.nonfinite import nonfinite
from inkling_probe.compare.explain.nonzero import nonzero
from inkling_probe.compare.explain.lookup import positionless_lookup
from inkling_probe.compare.explain.offset import channel_offset
from inkling_probe.compare.explain.pair import Pair
from inkling_probe.compare.explain.permute import layout_permutation
from inkling_probe.compare.explain.ratio import constant_ratio
from inkling_probe.compare.explain.renorm import renormalised_rows
from inkling_probe.compare.explain.reorder import reordered_input
from inkling_probe.compare.explain.rounding import rounding
from inkling_probe.compare.explain.saturate import saturation
from inkling_probe.compare.explain.scaled import row_or_channel_ratio
from inkling_probe.compare.explain.shift import sequence_shift
from inkling_probe.compare.explain.zeroed import FLUSHED_SHARE, flushed, measure, zeroed

__all__ = ["explain", "Context", "Finding", "KINDS", "unpack_fp4"]


def explain(ref, cand, context: Context | None = None, **fields) -> list[Finding]:
    """The hypotheses that hold for ``cand`` against ``ref`` (same shape), strongest first.

    ``ref``/``cand`` are numpy arrays of any real dtype (torch tensors are accepted too, by duck
    typing); values are computed in float64. ``context`` (or its fields as keywords: ``noise``,
    ``token_dim``, ``tp_sizes``, ``head_dim``, ``routing``, ``ref_dtype``, ``cand_dtype``, ``inputs``) says what
    counts as noise and what the dims are; ``noise`` defaults to 4 x eps of the coarser dtype.
    """
    (r, r_dtype), (c, c_dtype) = as_values(ref), as_values(cand)
    if r.shape != c.shape:
        raise ValueError(f"explain needs equal shapes, got {list(r.shape)} and {list(c.shape)}")
    ctx = _context(r, r_dtype, c_dtype, context, fields)
    p = Pair.of(_contiguous(r), _contiguous(c), ctx)
    found = nonfinite(p) if p.stats.nonfinite else []
    if p.rel <= ctx.noise:
        return found
    if p.stats.rr == 0:  # a zero reference: nothing relative to it can hold; say what is there instead
        return found + [f for f in (nonzero(p),) if f is not None] + confined(p)
    ratio = constant_ratio(p)
    found += [f for f in (ratio, renormalised_rows(p), layout_permutation(p), sequence_shift(p), rounding(p))
              if f is not None]
    found += row_or_channel_ratio(p, ratio is not None)
    found += [f for f in (channel_offset(p), saturation(p)) if f is not None]
    weak = []
    if ctx.inputs:  # hypotheses that read the key's recorded inputs too (weak evidence: after the rest)
        for f in (reordered_input(p), positionless_lookup(p)):
            if f is not None:
                (weak if f.evidence.get("weak") else found).append(f)
    if p.stats.zeroed_energy >= FLUSHED_SHARE * p.stats.dd:  # the zeros may carry the error
        z = measure(p)
        found += [f for f in (zeroed(p, z), flushed(p, z)) if f is not None]
    return found + weak + confined(p)


def _contiguous(x: np.ndarray) -> np.ndarray:
    """C order (blocks are flat ranges); a copy only for a strided view. 0-d arrays stay 0-d."""
    return x if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(x.shape)


def _context(r: np.ndarray, r_dtype: str, c_dtype: str, context: Context | None, fields: dict) -> Context:
    ctx = dataclasses.replace(context or Context(), **fields)
    ctx.ref_dtype = ctx.ref_dtype or r_dtype
    ctx.cand_dtype = ctx.cand_dtype or c_dtype
    if ctx.noise is None:
        ctx.noise = default_noise(ctx.ref_dtype, ctx.cand_dtype)
    d = ctx.token_dim
    ctx.token_dim = None if d is None or not -r.ndim <= d < r.ndim else d % r.ndim
    if ctx.routing is not None:
        ctx.routing = as_values(ctx.routing)[0]
    ctx.tp_sizes = tuple(int(t) for t in ctx.tp_sizes)
    if ctx.inputs:
        ctx.inputs = {str(k): as_values(v)[0] for k, v in ctx.inputs.items()}
    return ctx



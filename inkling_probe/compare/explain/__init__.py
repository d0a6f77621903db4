"""Explain a diverged pair: test the hypotheses of DESIGN.md part 4 and return those that hold.

Each hypothesis returns evidence (numbers) and holds only when it explains the difference: after
undoing the ratio, permutation, shift or clamp the residual error is at the noise level, or the
zeroed / non-finite / confined positions carry the error. A pair that agrees within ``noise``
has nothing to explain (an empty list).

    from inkling_probe.compare import explain
    explain.explain(ref, cand, noise=0.03, token_dim=0)  # -> [Finding(...), ...]
"""
from __future__ import annotations

import dataclasses

import torch

from inkling_probe.compare.explain.base import Context, Finding, rel
from inkling_probe.compare.explain.confined import confined
from inkling_probe.compare.explain.nonfinite import nonfinite
from inkling_probe.compare.explain.permute import layout_permutation
from inkling_probe.compare.explain.ratio import constant_ratio
from inkling_probe.compare.explain.saturate import saturation
from inkling_probe.compare.explain.shift import sequence_shift
from inkling_probe.compare.explain.zeroed import flushed, zeroed
from inkling_probe.compare.floor import base_threshold, coarsest
from inkling_probe.compare.values import values

__all__ = ["explain", "Context", "Finding"]

_SINGLE = (constant_ratio, layout_permutation, sequence_shift, saturation, zeroed)


def explain(ref: torch.Tensor, cand: torch.Tensor, context: Context | None = None, **fields) -> list[Finding]:
    """The hypotheses that hold for ``cand`` against ``ref`` (same shape), strongest first.

    ``context`` (or its fields as keywords: ``noise``, ``token_dim``, ``tp_sizes``, ``head_dim``,
    ``routing``) says what counts as noise and what the dims are; ``noise`` defaults to the
    dtype-aware threshold of the coarser of the two dtypes.
    """
    if ref.shape != cand.shape:
        raise ValueError(f"explain needs equal shapes, got {list(ref.shape)} and {list(cand.shape)}")
    ctx = _context(ref, cand, context, fields)
    r, c = values(ref.detach().cpu()), values(cand.detach().cpu())
    found = nonfinite(r, c, ctx)
    if not found and rel(r, c) <= ctx.noise:
        return []
    for hypothesis in _SINGLE:
        f = hypothesis(r, c, ctx)
        if f is not None:
            found.append(f)
    if not any(f.name in ("zeroed", "constant_ratio") for f in found):
        f = flushed(r, c, ctx)
        if f is not None:
            found.append(f)
    found += confined(r, c, ctx)
    return found


def _context(ref, cand, context, fields) -> Context:
    ctx = context or Context(noise=None)
    ctx = dataclasses.replace(ctx, **fields) if fields else dataclasses.replace(ctx)
    if ctx.ref_dtype is None:
        ctx.ref_dtype = ref.dtype
    if ctx.cand_dtype is None:
        ctx.cand_dtype = cand.dtype
    if ctx.noise is None:
        ctx.noise = base_threshold(coarsest(ctx.ref_dtype, ctx.cand_dtype))
    if ctx.token_dim is not None and not 0 <= ctx.token_dim < max(ref.dim(), 1):
        ctx.token_dim = None
    return ctx

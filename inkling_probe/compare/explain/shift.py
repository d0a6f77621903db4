"""Sequence shift: the candidate's token t holds the reference's token t - n.

Tried for n = +-1 .. +-min(8, T // 2) along the token dim; holds for the shift after which the
overlapping tokens (at least two) agree at the noise level.
"""
from __future__ import annotations

import torch

from inkling_probe.compare.explain.base import Context, Finding, rel

MAX_SHIFT = 8


def sequence_shift(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> Finding | None:
    d = ctx.token_dim
    if d is None or ref.dim() == 0 or ref.shape[d] < 3 or rel(ref, cand) <= ctx.noise:
        return None
    t = ref.shape[d]
    best = None
    for n in [s * k for k in range(1, min(MAX_SHIFT, t // 2) + 1) for s in (1, -1)]:
        if n > 0:  # c[t] = r[t - n]
            residual = rel(ref.narrow(d, 0, t - n), cand.narrow(d, n, t - n))
        else:
            residual = rel(ref.narrow(d, -n, t + n), cand.narrow(d, 0, t + n))
        if residual <= ctx.noise and (best is None or residual < best[1]):
            best = (n, residual)
    if best is None:
        return None
    n, residual = best
    way = "later" if n > 0 else "earlier"
    return Finding("sequence_shift", f"candidate shifted by {n} token(s): its token t is the reference's "
                   f"token t{-n:+d} ({abs(n)} {way})", {"shift": n, "token_dim": d, "residual_rel_rms": residual})

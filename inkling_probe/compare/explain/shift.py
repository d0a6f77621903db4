"""Sequence shift: the candidate's token t holds the reference's token t - n.

Tried for n = +-1 .. +-min(8, T // 2) along the token dim on the sample of the overlapping tokens;
holds for the shift after which the overlap (at least two tokens) agrees at the noise level.
"""
from __future__ import annotations

from inkling_probe.compare.explain.base import Finding
from inkling_probe.compare.explain.pair import Pair

MAX_SHIFT = 8


def _narrow(x, d: int, start: int, length: int):
    return x[(slice(None),) * d + (slice(start, start + length),)]


def sequence_shift(p: Pair) -> Finding | None:
    d = p.ctx.token_dim
    if d is None or p.r.ndim == 0 or p.r.shape[d] < 3:
        return None
    t = p.r.shape[d]
    best = None
    for n in [s * k for k in range(1, min(MAX_SHIFT, t // 2) + 1) for s in (1, -1)]:
        # n > 0: c[t] = r[t - n]
        r, c = (_narrow(p.r, d, 0, t - n), _narrow(p.c, d, n, t - n)) if n > 0 else \
            (_narrow(p.r, d, -n, t + n), _narrow(p.c, d, 0, t + n))
        residual = p.residual(c=c, r=r)
        if residual is not None and (best is None or residual < best[1]):
            best = (n, residual)
    if best is None:
        return None
    n, residual = best
    way = "later" if n > 0 else "earlier"
    return Finding("sequence_shift", f"candidate shifted by {n} token(s): its token t is the reference's "
                   f"token t{-n:+d} ({abs(n)} {way})", {"shift": n, "token_dim": d, "residual_rel_rms": residual})

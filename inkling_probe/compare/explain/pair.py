"""The pair under explanation: both arrays, the context, the one-pass sums, and the residual of a
transform (tried on the sample first, verified on the whole only when the sample says it holds).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare.explain import sample
from inkling_probe.compare.explain.base import Context
from inkling_probe.compare.explain.blocks import f64, rel, rel_of, sums
from inkling_probe.compare.explain.stats import Stats, collect

SCREEN = 3.0  # a sample residual up to SCREEN x noise is worth a look at the whole
MIN_FIT = 8  # a fitted factor or offset needs at least this many values


@dataclass
class Pair:
    r: np.ndarray
    c: np.ndarray
    ctx: Context
    stats: Stats
    row_dim: int | None  # the token dim, else dim 0 of a tensor of 2+ dims
    chan_dim: int | None  # the last dim of a tensor of 2+ dims, when it is not the row dim

    @classmethod
    def of(cls, r: np.ndarray, c: np.ndarray, ctx: Context) -> "Pair":
        row = ctx.token_dim if ctx.token_dim is not None else (0 if r.ndim >= 2 else None)
        chan = r.ndim - 1 if r.ndim >= 2 and r.ndim - 1 != row else None
        return cls(r, c, ctx, collect(r, c, row, chan), row, chan)

    @property
    def noise(self) -> float:
        return self.ctx.noise

    @property
    def rel(self) -> float:
        return self.stats.rel

    def residual(self, c=None, r=None, map_r=None, map_c=None, at=None) -> float | None:
        """rel_rms(map_r(r), map_c(c)) when it is within noise (None otherwise): on the sample first
        (``at``: fixed indices of one dim, see :func:`.sample.grid`), then on every element."""
        r = self.r if r is None else r
        c = self.c if c is None else c
        s = self.sample_rel(r, c, map_r, map_c, at)
        if s > SCREEN * self.noise:
            return None
        if not sample.is_whole(r.shape):
            s = rel(r, c, map_r, map_c)
        return s if s <= self.noise else None

    def sample_rel(self, r, c, map_r=None, map_c=None, at=None) -> float:
        ix = sample.grid(r.shape, at=at)
        rb, cb = f64(r[ix]), f64(c[ix])
        if map_r is not None:
            rb = map_r(rb, ix)
        if map_c is not None:
            cb = map_c(cb, ix)
        return rel_of(*sums(rb, cb))

"""Saturation: the candidate is clamped at a level (a format's max) the reference exceeds.

The level is the candidate's largest finite magnitude ``m`` (from the one-pass sums). The
hypothesis holds when at least two candidate values sit at +-m, the reference exceeds ``m`` at most
of them, and clamping the reference to [-m, m] leaves a residual at the noise level (tried on the
sample, then counted and verified in one pass). ``m`` is named when it is a format's max: fp8 e4m3
448, e4m3fnuz 240, e5m2 57344, fp16 65504, fp4 e2m1 6, bf16 3.39e38.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num
from inkling_probe.compare.explain.blocks import block_keys, f64, rel_of, sums
from inkling_probe.compare.explain.dtypes import FORMAT_MAX
from inkling_probe.compare.explain.pair import SCREEN, Pair


def saturation(p: Pair) -> Finding | None:
    m, top = p.stats.c_absmax, p.stats.r_absmax
    if m == 0 or top <= m * (1 + p.noise) or p.r.size < 2:
        return None
    if p.sample_rel(p.r, p.c, map_r=lambda rb, key: np.clip(rb, -m, m)) > SCREEN * p.noise:
        return None
    n_at, beyond, residual = _count(p, m)
    if n_at < 2 or beyond * 2 < n_at or residual > p.noise:
        return None
    name = next((label for v, label in FORMAT_MAX.items() if abs(m / v - 1) <= 1e-3), None)
    what = f" ({name})" if name else ""
    return Finding("saturation", f"candidate clamped at +-{fmt_num(m)}{what}: {n_at} values, the reference "
                   f"reaches {fmt_num(top)}", {"level": m, "format": name, "clamped": n_at, "ref_absmax": top,
                                               "residual_rel_rms": residual})


def _count(p: Pair, m: float) -> tuple[int, int, float]:
    """(values at +-m in the candidate, of them beyond m in the reference, rel_rms(clamp(r), c))."""
    n_at = beyond = 0
    dd = rr = 0.0
    for key in block_keys(p.r.shape):
        rb, cb = f64(p.r[key]), f64(p.c[key])
        at = np.abs(cb) >= m * (1 - 1e-6)
        n_at += int(np.count_nonzero(at))
        beyond += int(np.count_nonzero(np.abs(rb[at]) > m * (1 + p.noise)))
        a, b = sums(np.clip(rb, -m, m), cb)
        dd, rr = dd + a, rr + b
    return n_at, beyond, rel_of(dd, rr)

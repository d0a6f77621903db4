"""Constant ratio: ``c = s * r`` for one scalar ``s``, matched against known constants.

The ratio is the least-squares fit ``s = <c, r> / <r, r>`` (from the one-pass sums); the hypothesis
holds when undoing it leaves a residual at the noise level (``rel_rms(r, c / s) <= noise``, screened
from the sums, verified on the values) and ``s`` is not 1 within the noise. Known constants: 6
(fp4 max), 448 (fp8 e4m3 max), 2688 = 6 * 448 (the NVFP4 global scale divisor), 2**k, sqrt(d) for
the tensor's dim sizes and the head dim, tp_size, -1, and their inverses.
"""
from __future__ import annotations

import math

from inkling_probe.compare.explain.base import Context, Finding, fmt_num
from inkling_probe.compare.explain.pair import Pair


def known_constants(ctx: Context, shape) -> list[tuple[float, str]]:
    """(value, label) pairs a wrong scale tends to be; inverses included."""
    base = [(6.0, "6 (fp4 e2m1 max)"), (448.0, "448 (fp8 e4m3 max)"), (2688.0, "2688 = 6*448"),
            (-1.0, "-1 (sign flip)")]
    base += [(2.0 ** k, f"2**{k}") for k in range(1, 25)]
    dims = {int(s) for s in shape if int(s) > 1} | ({ctx.head_dim} if ctx.head_dim else set())
    base += [(math.sqrt(d), f"sqrt({d})") for d in sorted(dims)]
    base += [(float(t), f"tp_size {t}") for t in sorted(set(ctx.tp_sizes)) if t > 1]
    out = list(base)
    out += [(1.0 / v, f"1/({label})" if " " in label else f"1/{label}") for v, label in base if v != -1.0]
    return out


def match_constant(ratio: float, ctx: Context, shape, tol: float) -> list[str]:
    """Labels of the known constants within relative ``tol`` of ``ratio`` (closest first)."""
    hits = [(abs(ratio / v - 1.0), label) for v, label in known_constants(ctx, shape) if abs(ratio / v - 1.0) <= tol]
    return [label for _, label in sorted(hits)]


def fitted_residual(rr, rc, cc):
    """rel_rms(r, c / s) for the least-squares ``s = rc / rr``, from sums (numpy arrays or floats):
    ``||c/s - r||^2 = cc rr^2 / rc^2 - rr``."""
    return cc * rr * rr / (rc * rc) - rr


def constant_ratio(p: Pair) -> Finding | None:
    st = p.stats
    if st.rr == 0 or st.rc == 0:
        return None
    s = st.rc / st.rr
    if abs(s - 1.0) <= p.noise or math.sqrt(max(fitted_residual(st.rr, st.rc, st.cc), 0.0) / st.rr) > 2 * p.noise:
        return None
    residual = p.residual(map_c=lambda cb, key: cb / s)
    if residual is None:
        return None
    matches = match_constant(s, p.ctx, p.r.shape, tol=max(1e-3, 2 * p.noise))
    named = f" ({' = '.join(matches[:3])})" if matches else " (no known constant)"
    return Finding("constant_ratio", f"candidate = {fmt_num(s)} x reference{named}",
                   {"ratio": s, "inverse": 1.0 / s, "residual_rel_rms": residual, "matches": matches})

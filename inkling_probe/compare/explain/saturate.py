"""Saturation: the candidate is clamped at a level (a format's max) the reference exceeds.

The level is the candidate's largest finite magnitude ``m``. The hypothesis holds when at least
two candidate values sit at +-m, the reference exceeds ``m`` at most of them, and clamping the
reference to [-m, m] leaves a residual at the noise level. ``m`` is named when it is a format's
max: fp8 e4m3 448, e4m3fnuz 240, e5m2 57344, fp16 65504, fp4 e2m1 6, bf16 3.39e38.
"""
from __future__ import annotations

import torch

from inkling_probe.compare.explain.base import Context, Finding, fmt_num, rel

FORMAT_MAX = {448.0: "fp8 e4m3 max", 240.0: "fp8 e4m3fnuz max", 57344.0: "fp8 e5m2 max",
              65504.0: "fp16 max", 6.0: "fp4 e2m1 max", float(torch.finfo(torch.bfloat16).max): "bf16 max"}


def saturation(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> Finding | None:
    both = torch.isfinite(ref) & torch.isfinite(cand)
    r, c = ref[both], cand[both]
    if c.numel() < 2 or rel(r, c) <= ctx.noise:
        return None
    m = float(c.abs().max())
    if m == 0:
        return None
    at = c.abs() >= m * (1 - 1e-6)
    n_at = int(at.sum())
    beyond = int((r[at].abs() > m * (1 + ctx.noise)).sum())
    if n_at < 2 or beyond * 2 < n_at:
        return None
    residual = rel(r.clamp(-m, m), c)
    if residual > ctx.noise:
        return None
    name = next((label for v, label in FORMAT_MAX.items() if abs(m / v - 1) <= 1e-3), None)
    what = f" ({name})" if name else ""
    return Finding("saturation", f"candidate clamped at +-{fmt_num(m)}{what}: {n_at} values, the reference "
                   f"reaches {fmt_num(float(r.abs().max()))}",
                   {"level": m, "format": name, "clamped": n_at, "ref_absmax": float(r.abs().max()),
                    "residual_rel_rms": residual})

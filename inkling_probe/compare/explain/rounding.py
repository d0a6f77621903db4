"""Rounding: one side equals the other rounded to bf16, fp16 or fp8 e4m3 (round-to-nearest-even).

Holds when rounding the reference (or the candidate) to the format leaves a residual that is both
within noise and at most a tenth of the pair's rel_rms: the rounding is the whole difference, not
part of it. Tried on the sample for each format and side, verified on every value for the best.
Evidence says whether the rounded side's declared dtype is that format (then the rounding is
expected and the noise level was tighter than the dtype).
"""
from __future__ import annotations

from inkling_probe.compare.explain.base import Finding, fmt_num
from inkling_probe.compare.explain.blocks import rel
from inkling_probe.compare.explain.formats import FORMATS, round_to
from inkling_probe.compare.explain.pair import Pair

SHARE = 0.1  # the residual after rounding is at most this share of the difference


def rounding(p: Pair) -> Finding | None:
    base = p.sample_rel(p.r, p.c)
    tried = []
    for fmt in FORMATS:
        rnd = (lambda f: lambda x, key: round_to(x, f))(fmt)
        for side, kw in (("candidate", {"map_r": rnd}), ("reference", {"map_c": rnd})):
            s = p.sample_rel(p.r, p.c, **kw)
            if s <= min(p.noise, SHARE * base):
                tried.append((s, fmt, side, kw))
    for _, fmt, side, kw in sorted(tried, key=lambda t: t[0]):
        residual = rel(p.r, p.c, **kw)
        if residual <= min(p.noise, SHARE * p.rel):
            return _finding(p, fmt, side, residual)
    return None


def _finding(p: Pair, fmt: str, side: str, residual: float) -> Finding:
    other = "reference" if side == "candidate" else "candidate"
    declared = (p.ctx.cand_dtype if side == "candidate" else p.ctx.ref_dtype) == fmt
    why = f" (its dtype is {fmt}: expected)" if declared else ""
    return Finding("rounding", f"{side} = {other} rounded to {fmt}{why}: residual {fmt_num(residual)} "
                   f"of rel_rms {fmt_num(p.rel)}",
                   {"format": fmt, "side": side, "declared": declared, "rel_rms": p.rel,
                    "residual_rel_rms": residual})

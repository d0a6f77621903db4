"""A zero reference: the candidate holds values where the reference is exactly zero everywhere.

Every other hypothesis is relative to the reference's energy (ratios, offsets, residuals over
``||r||``), so none can hold; this one says what is there instead: how many values are non-zero,
their rms and largest magnitude, and (through ``confined``) where they sit. The bug class is "this
should be zero and is not": a mask not applied, a padding row written, a bias added twice to a
zero-initialised buffer.
"""
from __future__ import annotations

import math

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num
from inkling_probe.compare.explain.blocks import block_keys, f64
from inkling_probe.compare.explain.pair import Pair


def nonzero(p: Pair) -> Finding | None:
    """The reference is zero at every finite position and the candidate is not."""
    st = p.stats
    if st.rr != 0 or st.cc == 0:
        return None
    count = 0
    for key in block_keys(p.r.shape):
        cb = f64(p.c[key])
        count += int(np.count_nonzero(np.isfinite(cb) & (cb != 0)))
    rms = math.sqrt(st.cc / max(p.r.size, 1))
    return Finding("nonzero", f"the reference is all zeros; the candidate is not: {count} of {p.r.size} values "
                   f"non-zero (rms {fmt_num(rms)}, max |c| {fmt_num(st.c_absmax)})",
                   {"nonzero": count, "of": int(p.r.size), "cand_rms": rms, "cand_absmax": st.c_absmax})

"""The culprit's recorded inputs, row by row: what the input hypotheses (:mod:`.reorder`,
:mod:`.lookup`) read besides the two outputs.

``Context.inputs`` holds the reference's recorded inputs of the key (``KEY.in.<name>``, as
``record(..., inputs=True)`` writes them), name -> array. An input is usable when, after dropping
leading size-1 dims (transformers' batch dim), its dim 0 has as many rows as the pair's row dim:
row ``t`` of the input is what row ``t`` of the output was computed from.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.explain.pair import Pair

MAX_INPUT = 1 << 24  # elements: a larger input is not read by the input hypotheses
MARGIN = 4.0  # a row changed when its own error exceeds MARGIN x noise


def row_inputs(p: Pair) -> list[tuple[str, np.ndarray]]:
    """(name, input ``[rows, ...]``) of every usable recorded input, in name order."""
    if not p.ctx.inputs or p.row_dim is None:
        return []
    n = p.r.shape[p.row_dim]
    out = []
    for name in sorted(p.ctx.inputs):
        x = np.asarray(p.ctx.inputs[name])
        while x.ndim > 1 and x.shape[0] == 1 and n != 1:
            x = x[0]
        if x.ndim >= 1 and x.shape[0] == n and x.size <= MAX_INPUT and x.dtype.kind in "fiub":
            out.append((name, x))
    return out


def row_errors(p: Pair) -> np.ndarray | None:
    """Each row's own error ``||c_t - r_t|| / ||r_t||`` along the row dim ([rows]), or None."""
    al = p.stats.dims.get(p.row_dim) if p.row_dim is not None else None
    if al is None:
        return None
    dd, rr = np.asarray(al.dd, np.float64), np.asarray(al.rr, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rr > 0, np.sqrt(dd / np.where(rr > 0, rr, 1.0)), np.where(dd > 0, np.inf, 0.0))


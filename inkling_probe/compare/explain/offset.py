"""Per-channel offset: ``c[.., j] = r[.., j] + b_j`` along the last dim (a dropped or doubled bias).

``b_j`` is the mean of ``c - r`` over the channel's values (from the one-pass sums); the hypothesis
holds when removing it leaves a residual at the noise level (``||c - r - b||^2`` screened from the
sums, verified on the values) and every channel has at least 8 values. Evidence: the offsets'
spread, the channels whose offset is off 0 by more than 4 x noise x rms(r), and whether one
offset serves every channel.
"""
from __future__ import annotations

import math

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num, short_list, summary_of
from inkling_probe.compare.explain.blocks import pick
from inkling_probe.compare.explain.pair import MIN_FIT, Pair

MARGIN = 4.0


def channel_offset(p: Pair) -> Finding | None:
    d = p.chan_dim
    al = p.stats.dims.get(d) if d is not None else None
    if al is None or al.sd is None or p.stats.rr == 0:
        return None
    n = p.r.size // p.r.shape[d]  # values per channel
    if n < MIN_FIT:
        return None
    b = al.sd / n
    if math.sqrt(max(float((al.dd - al.sd * b).sum()), 0.0) / p.stats.rr) > 2 * p.noise:
        return None
    residual = p.residual(map_c=lambda cb, key: cb - pick(b, key, d, p.r.ndim))
    if residual is None:
        return None
    rms = math.sqrt(p.stats.rr / p.r.size)
    off = np.flatnonzero(np.abs(b) > MARGIN * p.noise * rms)
    one = bool(b.max() - b.min() <= MARGIN * p.noise * rms)
    ev = {"dim": d, "offsets": summary_of(b), "channels": off.tolist(), "channel_offsets": b[off[:64]].tolist(),
          "constant": one, "ref_rms": rms, "residual_rel_rms": residual}
    what = (f"one offset {fmt_num(float(b.mean()))} on every channel" if one else
            f"offsets {fmt_num(float(b.min()))}..{fmt_num(float(b.max()))}")
    return Finding("channel_offset", f"candidate = reference + a per-channel offset (a dropped bias?): "
                   f"channels {short_list(off.tolist())} ({len(off)} of {len(b)}), {what}", ev)

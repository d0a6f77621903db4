"""Zeroed regions and NVFP4 flushed blocks: values zero in the candidate where the reference is not.

Both need candidate zeros where the reference is non-zero that carry at least 10% of the squared
error (from the one-pass sums); one more pass then measures the 16-element blocks.

- ``zeroed``: the candidate is exactly 0 where the reference is not, and those positions carry at
  least half of the squared error and form at least one whole token row or 16-element block along
  the last dim (the NVFP4 block). Reports the zeroed fraction, the rows and the blocks.
- ``flushed``: 16-element blocks zero in the candidate where the reference's are not, and they are
  the reference's quietest blocks (at most 2% of the surviving blocks are quieter than the loudest
  flushed one: an amplitude threshold, as when an NVFP4 block scale underflows) and carry at least
  10% of the squared error. No zero blocks, no flushed story.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare.explain.base import Finding, fmt_num, short_list, summary_of
from inkling_probe.compare.explain.blocks import block_keys, f64
from inkling_probe.compare.explain.pair import Pair

BLOCK = 16
BINS = 16  # histogram bins per octave of block amax
QUIETER = 0.02
FLUSHED_SHARE = 0.1


@dataclass
class Zeros:
    blocks: int = 0  # blocks zero in the candidate only
    blocks_total: int = 0  # blocks not zero in the reference
    flushed_energy: float = 0.0  # ||r||^2 over those blocks
    loudest_flushed: float = 0.0  # the largest reference amax among them
    survivors: np.ndarray | None = None  # histogram of log2 amax of the other non-zero blocks


def measure(p: Pair) -> Zeros:
    z = Zeros(survivors=np.zeros(2 * 1100 * BINS, dtype=np.int64))
    if p.r.ndim == 0 or p.r.shape[-1] % BLOCK:
        return z
    for key in block_keys(p.r.shape):
        rb, cb = f64(p.r[key]), f64(p.c[key])
        both = np.isfinite(rb) & np.isfinite(cb)
        _blocks(z, np.where(both, rb, 0.0).reshape(-1, BLOCK), np.where(both, cb, 0.0).reshape(-1, BLOCK))
    return z


def _blocks(z: Zeros, rb: np.ndarray, cb: np.ndarray) -> None:
    amax = np.abs(rb).max(axis=1)  # [blocks]
    live = amax > 0
    gone = live & ~cb.any(axis=1)
    z.blocks += int(gone.sum())
    z.blocks_total += int(live.sum())
    if gone.any():
        z.flushed_energy += float(np.square(rb[gone]).sum())
        z.loudest_flushed = max(z.loudest_flushed, float(amax[gone].max()))
    kept = amax[live & ~gone]
    z.survivors += np.bincount(_bin(kept), minlength=len(z.survivors))


def _bin(a: np.ndarray) -> np.ndarray:
    return (np.floor(np.log2(a) * BINS) + 1100 * BINS).astype(np.int64)


def zeroed(p: Pair, z: Zeros) -> Finding | None:
    err = p.stats.dd
    share = p.stats.zeroed_energy / err if err else 0.0
    rows = zero_rows(p)
    if share < 0.5 or (not rows and not z.blocks):
        return None
    zero_rr = p.stats.zeroed_energy
    rest_dd, rest_rr = max(err - zero_rr, 0.0), max(p.stats.rr - zero_rr, 0.0)
    residual = (rest_dd / rest_rr) ** 0.5 if rest_rr else 0.0
    frac = p.stats.zeroed / p.r.size
    parts = [f"{frac:.1%} of values zero in the candidate only"]
    if z.blocks:
        parts.append(f"{z.blocks} of {z.blocks_total} {BLOCK}-blocks flushed to zero")
    if rows:
        parts.append(f"token rows {short_list(rows)} all zero")
    return Finding("zeroed", "; ".join(parts) + f" (they carry {share:.0%} of the error)",
                   {"zeroed_fraction": frac, "error_share": share, "rows": rows, "blocks_zeroed": z.blocks,
                    "blocks_total": z.blocks_total, "residual_rel_rms": residual})


def flushed(p: Pair, z: Zeros) -> Finding | None:
    if not z.blocks or not p.stats.dd:
        return None
    kept = int(z.survivors.sum())
    quieter = int(z.survivors[:_bin(np.array([z.loudest_flushed]))[0]].sum())
    share = z.flushed_energy / p.stats.dd
    if quieter > QUIETER * kept or share < FLUSHED_SHARE:
        return None
    st = p.stats
    ev = {"blocks_flushed": z.blocks, "blocks_total": z.blocks_total, "loudest_flushed_amax": z.loudest_flushed,
          "of_ref_amax": z.loudest_flushed / st.r_absmax, "surviving_quieter": quieter,
          "error_share": share, "energy_ratio": st.cc / st.rr if st.rr else None}
    rows = ""
    al = st.dims.get(p.ctx.token_dim) if p.ctx.token_dim is not None and p.r.ndim >= 2 else None
    if al is not None and al.cc is not None:
        ratio = np.sqrt(al.cc / np.maximum(al.rr, 1e-300))  # [T]
        ev["row_norm_ratio"] = summary_of(ratio)
        q = ev["row_norm_ratio"]
        rows = f"; per token row norm ratio {q['min']:.2f}..{q['max']:.2f} (median {q['median']:.2f})"
    return Finding("flushed", f"{z.blocks} of {z.blocks_total} {BLOCK}-blocks flushed to zero, every one "
                   f"quieter than the surviving blocks (amax <= {fmt_num(z.loudest_flushed)}, "
                   f"1/{fmt_num(st.r_absmax / z.loudest_flushed)} of the reference's amax): an underflowed "
                   f"NVFP4 block scale{rows}", ev)


def zero_rows(p: Pair) -> list[int]:
    """Token rows all zero in the candidate only (from the per-row sums)."""
    d = p.ctx.token_dim
    al = p.stats.dims.get(d) if d is not None and p.r.ndim >= 2 else None
    if al is None or al.cc is None:
        return []
    return np.flatnonzero((al.cc == 0) & (al.rr > 0)).tolist()

"""Zeroed regions and lost energy: values flushed to zero (underflowed blocks, dropped rows).

- ``zeroed``: the candidate is exactly 0 where the reference is not. Reports the zeroed fraction,
  the token rows entirely zero in the candidate only, and the 16-element blocks along the last
  dim (NVFP4 block size) zero in the candidate only. Holds when the zeroed positions carry at least
  half of the squared error and form at least one whole row or block.
- ``flushed``: the zeros happened upstream (flushed input blocks of a GEMM) and the candidate
  output lost energy: ``||c||^2 < ||r||^2`` by at least 25%, the lost energy accounts for at least
  half of the error energy (``(||r||^2 - ||c||^2) >= 0.5 ||c - r||^2``; noise adds energy instead),
  and no constant ratio explains it. Reports the per-token-row norm ratio ``||c_t|| / ||r_t||``.
"""
from __future__ import annotations

import torch

from inkling_probe.compare.explain.base import Context, Finding, rel, short_list

BLOCK = 16


def zeroed(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> Finding | None:
    both = torch.isfinite(ref) & torch.isfinite(cand)
    z = both & (cand == 0) & (ref != 0)
    nz = int(z.sum())
    if nz == 0:
        return None
    err_total = float(torch.where(both, cand - ref, 0.0).square().sum())
    share = float(ref[z].square().sum()) / err_total if err_total else 0.0
    rows = _zero_rows(ref, cand, ctx.token_dim)
    blocks, block_total = _zero_blocks(ref, cand)
    if share < 0.5 or (not rows and not blocks):
        return None
    rest = both & ~z
    residual = rel(ref[rest], cand[rest])
    parts = [f"{nz / ref.numel():.1%} of values zero in the candidate only"]
    if blocks:
        parts.append(f"{blocks} of {block_total} {BLOCK}-blocks flushed to zero")
    if rows:
        parts.append(f"token rows {short_list(rows)} all zero")
    return Finding("zeroed", "; ".join(parts) + f" (they carry {share:.0%} of the error)",
                   {"zeroed_fraction": nz / ref.numel(), "error_share": share, "rows": rows,
                    "blocks_zeroed": blocks, "blocks_total": block_total, "residual_rel_rms": residual})


def flushed(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> Finding | None:
    both = torch.isfinite(ref) & torch.isfinite(cand)
    r, c = torch.where(both, ref, 0.0), torch.where(both, cand, 0.0)
    rr, cc, dd = float(r.square().sum()), float(c.square().sum()), float((c - r).square().sum())
    if rr == 0 or dd == 0 or rel(r, c) <= ctx.noise:
        return None
    lost, share = 1 - cc / rr, (rr - cc) / dd
    s = float((r * c).sum()) / rr
    if lost < 0.25 or share < 0.5 or (s > 0 and rel(r, c / s) <= ctx.noise):
        return None
    ev = {"energy_ratio": cc / rr, "norm_ratio": (cc / rr) ** 0.5, "lost_share_of_error": share,
          "least_squares_ratio": s}
    rows = ""
    if ctx.token_dim is not None and ref.dim() >= 2:
        dims = [i for i in range(ref.dim()) if i != ctx.token_dim]
        ratio = (c.square().sum(dim=dims) / r.square().sum(dim=dims).clamp_min(1e-300)).sqrt()  # [T]
        q = torch.quantile(ratio, torch.tensor([0.0, 0.5, 1.0], dtype=ratio.dtype)).tolist()
        ev["row_norm_ratio"] = {"min": q[0], "median": q[1], "max": q[2]}
        rows = f"; per token row {q[0]:.2f}..{q[2]:.2f} (median {q[1]:.2f})"
    return Finding("flushed", f"candidate lost {lost:.0%} of the reference's energy (norm ratio {ev['norm_ratio']:.2f}"
                   f"{rows}), not a constant ratio: values flushed to zero upstream (e.g. underflowed NVFP4 "
                   f"blocks of a GEMM input)", ev)


def _zero_rows(ref, cand, token_dim) -> list[int]:
    if token_dim is None or ref.dim() < 2:
        return []
    dims = [i for i in range(ref.dim()) if i != token_dim]
    c_zero = (cand == 0).all(dim=dims) if dims else cand == 0
    r_zero = (ref == 0).all(dim=dims) if dims else ref == 0
    return (c_zero & ~r_zero).nonzero().flatten().tolist()


def _zero_blocks(ref, cand) -> tuple[int, int]:
    """(blocks zero in the candidate only, blocks not zero in the reference)."""
    n = ref.shape[-1] if ref.dim() else 0
    if n < BLOCK or n % BLOCK:
        return 0, 0
    rb = ref.reshape(-1, BLOCK)
    cb = cand.reshape(-1, BLOCK)
    r_nonzero = (rb != 0).any(dim=1)
    flushed = r_nonzero & (cb == 0).all(dim=1)
    return int(flushed.sum()), int(r_nonzero.sum())

"""Zeroed regions: the candidate is exactly 0 where the reference is not (flushed blocks, dropped rows).

Reports the zeroed fraction, the token rows that are entirely zero in the candidate only, and the
16-element blocks along the last dim (NVFP4 block size) zero in the candidate only. The hypothesis
holds when the zeroed positions carry at least half of the squared error (they explain most of
the difference) and form at least one whole row or block.
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

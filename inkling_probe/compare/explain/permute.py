"""Layout permutation: the candidate holds the reference's values in another order.

Each transform undoes one layout bug on the candidate; the hypothesis holds for a transform
after which the residual is at the noise level (and only when the untransformed pair diverges):

- ``transpose``: the last two dims swapped (square matrices; other shapes fail at alignment);
- ``interleaved_as_concat`` / ``concat_as_interleaved`` along a dim: rows ``[g0, u0, g1, u1, ...]``
  read as ``[g; u]`` or the reverse (the gate/up layout of a fused w13);
- ``swapped_halves`` along a dim;
- ``shard_order`` along a dim for tp in the dumps' world sizes and 2, 4, 8: the tp chunks in
  another order (the permutation is found by matching each chunk to its best reference chunk);
- ``adjacent_pairs_swapped`` along the last dim: fp4 nibble order (low/high nibble swapped)
  when a side is packed fp4 or uint8.
"""
from __future__ import annotations

import torch

from inkling_probe.store.dtypes import FP4X2

from inkling_probe.compare.explain.base import Context, Finding, rel

_FP4_LIKE = {FP4X2, torch.uint8} - {None}


def interleaved_to_concat(c: torch.Tensor, d: int) -> torch.Tensor:
    n = c.shape[d]
    idx = torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)])
    return c.index_select(d, idx)


def concat_to_interleaved(c: torch.Tensor, d: int) -> torch.Tensor:
    n = c.shape[d]
    idx = torch.stack([torch.arange(n // 2), torch.arange(n // 2) + n // 2], dim=1).reshape(-1)
    return c.index_select(d, idx)


def swap_halves(c: torch.Tensor, d: int) -> torch.Tensor:
    return torch.cat(c.chunk(2, dim=d)[::-1], dim=d)


def _pairs_swapped(c: torch.Tensor) -> torch.Tensor:
    return c.reshape(*c.shape[:-1], c.shape[-1] // 2, 2).flip(-1).reshape(c.shape)


def _shard_order(ref: torch.Tensor, cand: torch.Tensor, d: int, tp: int):
    """The chunk permutation (candidate chunk j holds reference chunk perm[j]) and the residual."""
    rc, cc = ref.chunk(tp, dim=d), cand.chunk(tp, dim=d)
    perm = []
    for c in cc:
        errs = [rel(r, c) for r in rc]
        perm.append(min(range(tp), key=errs.__getitem__))
    if sorted(perm) != list(range(tp)) or perm == list(range(tp)):
        return None, None
    undone = torch.cat([cc[perm.index(i)] for i in range(tp)], dim=d)
    return perm, rel(ref, undone)


def _dim_transforms(ref: torch.Tensor, d: int):
    n = ref.shape[d]
    if n >= 4 and n % 2 == 0:
        yield "interleaved_as_concat", f"candidate rows interleaved [g0, u0, g1, u1, ...] where the reference " \
            f"has them concatenated [g; u] along dim {d}", lambda c: interleaved_to_concat(c, d)
        yield "concat_as_interleaved", f"candidate concatenated [g; u] where the reference interleaves " \
            f"[g0, u0, g1, u1, ...] along dim {d}", lambda c: concat_to_interleaved(c, d)
    if n >= 2 and n % 2 == 0:
        yield "swapped_halves", f"candidate halves swapped along dim {d}", lambda c: swap_halves(c, d)


def layout_permutation(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> Finding | None:
    if ref.dim() == 0 or rel(ref, cand) <= ctx.noise:
        return None
    best = None
    for name, summary, undo, params in _transforms(ref, ctx):
        residual = rel(ref, undo(cand))
        if residual <= ctx.noise and (best is None or residual < best.evidence["residual_rel_rms"]):
            best = Finding("layout_permutation", summary, {"permutation": name, **params, "residual_rel_rms": residual})
    for d in range(ref.dim()):
        for tp in sorted({*ctx.tp_sizes, 2, 4, 8}):
            if tp <= 2 or ref.shape[d] % tp:  # tp 2 reversed is swapped_halves
                continue
            perm, residual = _shard_order(ref, cand, d, tp)
            if perm is not None and residual <= ctx.noise and best is None:
                best = Finding("layout_permutation", f"tp={tp} shards along dim {d} in order {perm}",
                               {"permutation": "shard_order", "dim": d, "tp": tp, "order": perm,
                                "residual_rel_rms": residual})
    return best


def _transforms(ref: torch.Tensor, ctx: Context):
    if ref.dim() >= 2 and ref.shape[-1] == ref.shape[-2]:
        yield "transpose", "candidate is the transpose of the reference (last two dims)", \
            lambda c: c.transpose(-1, -2), {"dim": [ref.dim() - 2, ref.dim() - 1]}
    for d in range(ref.dim()):
        for name, summary, undo in _dim_transforms(ref, d):
            yield name, summary, undo, {"dim": d}
    if ref.shape[-1] % 2 == 0 and ref.shape[-1] >= 2:
        nibble = ctx.ref_dtype in _FP4_LIKE or ctx.cand_dtype in _FP4_LIKE
        summary = ("fp4 nibble order swapped (low/high nibble of each byte)" if nibble
                   else "adjacent pairs swapped along the last dim")
        yield ("fp4_nibble_order" if nibble else "adjacent_pairs_swapped"), summary, _pairs_swapped, \
            {"dim": ref.dim() - 1}

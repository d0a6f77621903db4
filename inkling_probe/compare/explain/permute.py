"""Layout permutation: the candidate holds the reference's values in another order.

Each transform undoes one layout bug on the candidate (lazily, as a re-indexed view); the
hypothesis holds for a transform after which the residual is at the noise level (tried on the
sample, verified on the whole):

- ``transpose``: the last two dims swapped (square matrices);
- ``interleaved_as_concat`` / ``concat_as_interleaved`` along a dim: rows ``[g0, u0, g1, u1, ...]``
  read as ``[g; u]`` or the reverse (the gate/up layout of a fused w13);
- ``swapped_halves`` along a dim;
- ``shard_order`` along a dim for tp in the dumps' world sizes and 4, 8: the tp chunks in another
  order, each candidate chunk matched to its best reference chunk on a sample taking the same
  offsets in every chunk;
- ``chunk_order`` along the last dim: three chunks (q/k/v) of sizes ``[a, b, b]`` in another order
  (see :mod:`.qkv`);
- ``adjacent_pairs_swapped`` along the last dim, named ``fp4_nibble_order`` when a side is packed
  fp4 or uint8 (the caller unpacked the nibbles).

The index helpers work on numpy arrays and torch tensors alike (replay permutes parameters).
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.explain.base import Finding
from inkling_probe.compare.explain.blocks import Remapped, f64
from inkling_probe.compare.explain.pair import Pair
from inkling_probe.compare.explain.qkv import chunk_order
from inkling_probe.compare.explain import sample

_FP4_LIKE = {"float4_e2m1fn_x2", "uint8"}


def interleaved_index(n: int) -> np.ndarray:
    """undone[j] = x[idx[j]]: interleaved ``[g0, u0, g1, u1, ...]`` read back as ``[g; u]``."""
    return np.concatenate([np.arange(0, n, 2), np.arange(1, n, 2)])


def concat_index(n: int) -> np.ndarray:
    """undone[j] = x[idx[j]]: concatenated ``[g; u]`` read back as interleaved."""
    return np.stack([np.arange(n // 2), np.arange(n // 2) + n // 2], axis=1).reshape(-1)


def halves_index(n: int) -> np.ndarray:
    return np.concatenate([np.arange(n // 2, n), np.arange(n // 2)])


def _along(x, d: int, idx: np.ndarray):
    return x[(slice(None),) * d + (idx,)]


def interleaved_to_concat(x, d: int):
    return _along(x, d, interleaved_index(x.shape[d]))


def concat_to_interleaved(x, d: int):
    return _along(x, d, concat_index(x.shape[d]))


def swap_halves(x, d: int):
    return _along(x, d, halves_index(x.shape[d]))


def layout_permutation(p: Pair) -> Finding | None:
    if p.r.ndim == 0:
        return None
    best = None
    for name, summary, view, params in _transforms(p):
        residual = p.residual(c=view)
        if residual is not None and (best is None or residual < best.evidence["residual_rel_rms"]):
            best = Finding("layout_permutation", summary, {"permutation": name, **params, "residual_rel_rms": residual})
    return best or chunk_order(p) or shard_order(p)  # fewer chunks moved first: 2, then 3 (q/k/v), then tp


def _transforms(p: Pair):
    r, c = p.r, p.c
    if r.ndim >= 2 and r.shape[-1] == r.shape[-2]:
        yield "transpose", "candidate is the transpose of the reference (last two dims)", \
            np.swapaxes(c, -1, -2), {"dim": [r.ndim - 2, r.ndim - 1]}
    for d, n in enumerate(r.shape):
        if n >= 4 and n % 2 == 0:
            yield "interleaved_as_concat", f"candidate rows interleaved [g0, u0, g1, u1, ...] where the " \
                f"reference has them concatenated [g; u] along dim {d}", Remapped(c, d, interleaved_index(n)), {"dim": d}
            yield "concat_as_interleaved", f"candidate concatenated [g; u] where the reference interleaves " \
                f"[g0, u0, g1, u1, ...] along dim {d}", Remapped(c, d, concat_index(n)), {"dim": d}
        if n >= 2 and n % 2 == 0:
            yield "swapped_halves", f"candidate halves swapped along dim {d}", Remapped(c, d, halves_index(n)), {"dim": d}
    n = r.shape[-1]
    if n >= 2 and n % 2 == 0:
        nibble = p.ctx.ref_dtype in _FP4_LIKE or p.ctx.cand_dtype in _FP4_LIKE
        summary = ("fp4 nibble order swapped (low/high nibble of each byte)" if nibble
                   else "adjacent pairs swapped along the last dim")
        yield ("fp4_nibble_order" if nibble else "adjacent_pairs_swapped"), summary, \
            Remapped(c, r.ndim - 1, np.arange(n) ^ 1), {"dim": r.ndim - 1}


def shard_order(p: Pair) -> Finding | None:
    """tp chunks along a dim in another order (tp 2 reversed is swapped_halves)."""
    for d, n in enumerate(p.r.shape):
        for tp in sorted({*p.ctx.tp_sizes, 4, 8}):
            if tp <= 2 or n % tp:
                continue
            perm = _match_chunks(p, d, tp)
            if perm is None:
                continue
            m = n // tp
            src = np.concatenate([perm.index(i) * m + np.arange(m) for i in range(tp)])
            residual = p.residual(c=Remapped(p.c, d, src))
            if residual is not None:
                return Finding("layout_permutation", f"tp={tp} shards along dim {d} in order {perm}",
                               {"permutation": "shard_order", "dim": d, "tp": tp, "order": perm,
                                "residual_rel_rms": residual})
    return None


def _match_chunks(p: Pair, d: int, tp: int) -> list[int] | None:
    """Candidate chunk j holds reference chunk perm[j] (each matched on the sample), or None."""
    ix = sample.grid(p.r.shape, at=(d, sample.chunk_offsets(p.r.shape[d], tp)))
    rs, cs = (np.moveaxis(f64(x[ix]), d, 0).reshape(tp, -1) for x in (p.r, p.c))  # [tp, values of a chunk]
    rr, cc = (rs * rs).sum(1), (cs * cs).sum(1)
    err = cc[None, :] + rr[:, None] - 2 * rs @ cs.T  # [ref chunk i, cand chunk j] = ||c_j - r_i||^2
    perm = err.argmin(axis=0).tolist()
    if sorted(perm) != list(range(tp)) or perm == list(range(tp)):
        return None
    return perm

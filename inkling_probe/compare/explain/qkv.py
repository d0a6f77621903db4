"""Chunk order of a fused q/k/v projection: three chunks of the last dim in another order.

The reference's last dim is ``[q; k; v]`` with sizes ``[a, b, b]``, ``a = h * head_dim`` and
``b = g * head_dim`` (``g`` kv heads, ``h`` a multiple of ``g``; three equal chunks when ``h = g``);
the candidate holds the same chunks in another order (``[k; q; v]``, ``[q; v; k]``, ...). Without a
head dim every split ``n = a + 2b`` with ``b`` dividing ``a`` (``b >= 8``) is tried. A candidate order
is only tried when the candidate's first column matches the start of the chunk the order puts
first (on a sample of rows), then the order is tried on the sample and verified on the whole.
"""
from __future__ import annotations

from itertools import permutations

import numpy as np

from inkling_probe.compare.explain import sample
from inkling_probe.compare.explain.base import Finding
from inkling_probe.compare.explain.blocks import Remapped, f64, rel_of, sums
from inkling_probe.compare.explain.pair import SCREEN, Pair

NAMES = ("q", "k", "v")
MIN_CHUNK = 8
MAX_SPLITS = 64


def splits(n: int, head_dim: int | None) -> list[tuple[int, int]]:
    """(a, b) with ``a + 2b = n`` the last dim may be split into, largest ``a`` first."""
    if head_dim:
        if n % head_dim:
            return []
        heads = n // head_dim
        return [((heads - 2 * g) * head_dim, g * head_dim) for g in range(1, heads // 3 + 1)
                if (heads - 2 * g) % g == 0]
    out = [(n - 2 * (n // parts), n // parts) for parts in range(3, n // MIN_CHUNK + 1) if n % parts == 0]
    return out[:MAX_SPLITS]


def source_index(sizes: list[int], order: tuple[int, ...]) -> np.ndarray:
    """undone[j] = cand[src[j]] when candidate chunk j holds reference chunk order[j]."""
    cand_sizes = [sizes[i] for i in order]
    starts = np.concatenate([[0], np.cumsum(cand_sizes)[:-1]])
    return np.concatenate([starts[order.index(i)] + np.arange(sizes[i]) for i in range(len(sizes))])


def chunk_order(p: Pair) -> Finding | None:
    if p.r.ndim == 0 or p.r.shape[-1] < 3:
        return None
    d, n = p.r.ndim - 1, p.r.shape[-1]
    first = _first_column_matches(p, d, splits(n, p.ctx.head_dim))
    for (a, b), order in first:
        sizes = [a, b, b]
        residual = p.residual(c=Remapped(p.c, d, source_index(sizes, order)))
        if residual is not None:
            names = "[" + ", ".join(NAMES[i] for i in order) + "]"
            hd = f", head_dim {p.ctx.head_dim}" if p.ctx.head_dim else ""
            return Finding("layout_permutation", f"candidate holds the q/k/v chunks (sizes {sizes}{hd}) along "
                           f"dim {d} in order {names}", {"permutation": "chunk_order", "dim": d, "sizes": sizes,
                                                         "order": list(order), "names": names,
                                                         "residual_rel_rms": residual})
    return None


def _first_column_matches(p: Pair, d: int, cuts: list[tuple[int, int]]):
    """(split, order) pairs whose first chunk's start matches the candidate's column 0."""
    starts = sorted({0} | {a for a, _ in cuts} | {a + b for a, b in cuts})
    cols = np.array([0] + starts)  # the candidate's column 0, then the reference's chunk starts
    ix = sample.grid(p.r.shape, at=(d, cols))
    rs, cs = f64(p.r[ix]), f64(p.c[ix])
    c0 = np.take(cs, [0], axis=d)
    ok = {s for k, s in enumerate(starts) if rel_of(*sums(np.take(rs, [k + 1], axis=d), c0)) <= SCREEN * p.noise}
    out = []
    for a, b in cuts:
        begin = (0, a, a + b)
        out += [((a, b), order) for order in permutations(range(3))
                if order != (0, 1, 2) and begin[order[0]] in ok]
    return out

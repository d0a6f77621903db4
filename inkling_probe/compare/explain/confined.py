"""Divergence confined to some indices of one dim: token rows, heads, experts, channels.

Along a dim of size n, slice i's error is ``e_i = sqrt(n) ||c_i - r_i|| / ||r||`` (so that the
mean of ``e_i**2`` is ``rel_rms**2``), read off the one-pass per-index sums. The hypothesis holds
for the dim when the slices with ``e_i > 4 * noise`` are at most half of them, and the remaining
slices agree at the noise level (``rel_rms <= noise`` over them). Heads are tried by viewing the
last dim as ``[H, head_dim]``; experts through the routing (tokens -> expert ids): the experts every
one of whose tokens diverged, when they cover all the diverged tokens.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.explain.base import Finding, short_list
from inkling_probe.compare.explain.blocks import rel_of
from inkling_probe.compare.explain.pair import Pair

MARGIN = 4.0


def diverged_indices(dd: np.ndarray, rr: np.ndarray, total_rr: float, noise: float) -> list[int] | None:
    """Indices (of per-index sums ``dd``, ``rr``) that carry the divergence, or None when it is not
    confined to them."""
    n = len(dd)
    if n < 2:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.sqrt(dd * n / total_rr) if total_rr else np.where(dd > 0, np.inf, 0.0)
    bad = np.flatnonzero(e > MARGIN * noise)
    if not len(bad) or len(bad) > n // 2:
        return None
    keep = np.ones(n, bool)
    keep[bad] = False
    if rel_of(float(dd[keep].sum()), float(rr[keep].sum())) > noise:
        return None
    return bad.tolist()


def confined(p: Pair) -> list[Finding]:
    """One finding per dim (and for heads, experts) the divergence is confined to."""
    out = []
    for d, al in sorted(p.stats.dims.items()):
        bad = diverged_indices(al.dd, al.rr, p.stats.rr, p.noise)
        if bad is None:
            continue
        label = "token rows" if d == p.ctx.token_dim else f"indices of dim {d}"
        out.append(Finding("confined", f"divergence confined to {label} {short_list(bad)} "
                           f"({len(bad)} of {p.r.shape[d]})",
                           {"dim": d, "what": label, "indices": bad, "of": p.r.shape[d]}))
        if d == p.ctx.token_dim and p.ctx.routing is not None:
            experts = _experts(bad, np.asarray(p.ctx.routing), p.r.shape[d])
            if experts:
                out.append(Finding("confined", f"divergence confined to the tokens routed to experts "
                                   f"{short_list(experts)}", {"what": "experts", "indices": experts,
                                                              "tokens": bad}))
    return out + _heads(p)


def _heads(p: Pair) -> list[Finding]:
    hd, d = p.ctx.head_dim, p.r.ndim - 1
    al = p.stats.dims.get(d)
    if not hd or al is None or p.r.shape[-1] % hd or p.r.shape[-1] // hd < 2:
        return []
    heads = p.r.shape[-1] // hd
    bad = diverged_indices(al.dd.reshape(heads, hd).sum(1), al.rr.reshape(heads, hd).sum(1), p.stats.rr, p.noise)
    if bad is None:
        return []
    return [Finding("confined", f"divergence confined to heads {short_list(bad)} of {heads} "
                    f"(head_dim {hd})", {"what": "heads", "indices": bad, "of": heads, "head_dim": hd})]


def _experts(bad_tokens: list[int], routing: np.ndarray, n_tokens: int) -> list[int]:
    """Experts all of whose tokens diverged, if together they cover every diverged token."""
    routing = routing.reshape(routing.shape[0], -1).astype(np.int64)  # [T, k]
    if routing.shape[0] != n_tokens:
        return []
    bad = np.zeros(n_tokens, bool)
    bad[bad_tokens] = True
    used = sorted(set(routing.ravel().tolist()))
    chosen = [e for e in used if bad[(routing == e).any(axis=1)].all()]
    if not chosen or len(chosen) == len(used):
        return []
    covered = (routing[:, :, None] == np.array(chosen)).any(axis=(1, 2))  # [T]
    return chosen if covered[bad].all() else []

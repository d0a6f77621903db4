"""Divergence confined to some indices of one dim: token rows, heads, experts, channels.

Along a dim of size n, slice i's error is ``e_i = sqrt(n) ||c_i - r_i|| / ||r||`` (so that the
mean of ``e_i**2`` is ``rel_rms**2``). The hypothesis holds for the dim when the slices with
``e_i > 4 * noise`` are at most half of them, and the remaining slices agree at the noise level
(``rel_rms <= noise`` over them). Heads are tried by viewing the last dim as ``[H, head_dim]``;
experts through the routing (tokens -> expert ids): the experts every one of whose tokens
diverged, when they cover all the diverged tokens.
"""
from __future__ import annotations

import torch

from inkling_probe.compare.explain.base import Context, Finding, rel, short_list

MARGIN = 4.0


def slice_errors(ref: torch.Tensor, cand: torch.Tensor, d: int) -> torch.Tensor:
    """e_i along dim ``d`` (finite positions only)."""
    both = torch.isfinite(ref) & torch.isfinite(cand)
    diff = torch.where(both, cand - ref, 0.0)
    r = torch.where(both, ref, 0.0)
    dims = [i for i in range(ref.dim()) if i != d]
    per = diff.square().sum(dim=dims) if dims else diff.square()  # [n]
    total = float(r.square().sum())
    n = ref.shape[d]
    if total == 0:
        return torch.where(per > 0, torch.inf, 0.0)
    return (per * n / total).sqrt()


def diverged_indices(ref: torch.Tensor, cand: torch.Tensor, d: int, noise: float) -> list[int] | None:
    """Indices along ``d`` that carry the divergence, or None when it is not confined there."""
    n = ref.shape[d]
    if n < 2:
        return None
    e = slice_errors(ref, cand, d)
    bad = (e > MARGIN * noise).nonzero().flatten().tolist()
    if not bad or len(bad) > n // 2:
        return None
    keep = torch.ones(n, dtype=torch.bool)
    keep[bad] = False
    if rel(ref[(slice(None),) * d + (keep,)], cand[(slice(None),) * d + (keep,)]) > noise:
        return None
    return bad


def _label(d: int, ctx: Context, ndim: int) -> str:
    if d == ctx.token_dim:
        return "token rows"
    return f"indices of dim {d}"


def confined(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> list[Finding]:
    """One finding per dim (and for heads, experts) the divergence is confined to."""
    if ref.dim() == 0 or rel(ref, cand) <= ctx.noise:
        return []
    out = []
    for d in range(ref.dim()):
        bad = diverged_indices(ref, cand, d, ctx.noise)
        if bad is None:
            continue
        label = _label(d, ctx, ref.dim())
        out.append(Finding("confined", f"divergence confined to {label} {short_list(bad)} "
                           f"({len(bad)} of {ref.shape[d]})",
                           {"dim": d, "what": label, "indices": bad, "of": ref.shape[d]}))
        if d == ctx.token_dim and ctx.routing is not None:
            experts = _experts(bad, ctx.routing, ref.shape[d])
            if experts:
                out.append(Finding("confined", f"divergence confined to the tokens routed to experts "
                                   f"{short_list(experts)}", {"what": "experts", "indices": experts,
                                                              "tokens": bad}))
    out += _heads(ref, cand, ctx)
    return out


def _heads(ref, cand, ctx: Context) -> list[Finding]:
    hd = ctx.head_dim
    if not hd or ref.dim() < 1 or ref.shape[-1] % hd or ref.shape[-1] // hd < 2:
        return []
    shape = (*ref.shape[:-1], ref.shape[-1] // hd, hd)
    bad = diverged_indices(ref.reshape(shape), cand.reshape(shape), ref.dim() - 1, ctx.noise)
    if bad is None:
        return []
    return [Finding("confined", f"divergence confined to heads {short_list(bad)} of {shape[-2]} "
                    f"(head_dim {hd})", {"what": "heads", "indices": bad, "of": shape[-2], "head_dim": hd})]


def _experts(bad_tokens: list[int], routing: torch.Tensor, n_tokens: int) -> list[int]:
    """Experts all of whose tokens diverged, if together they cover every diverged token."""
    routing = routing.reshape(routing.shape[0], -1).long()  # [T, k]
    if routing.shape[0] != n_tokens:
        return []
    bad = torch.zeros(n_tokens, dtype=torch.bool)
    bad[bad_tokens] = True
    used = sorted(set(routing.flatten().tolist()))
    chosen = [e for e in used if bool(bad[(routing == e).any(dim=1)].all())]
    if not chosen or len(chosen) == len(used):
        return []
    covered = (routing.unsqueeze(-1) == torch.tensor(chosen)).any(dim=(1, 2))  # [T]
    return chosen if bool(covered[bad].all()) else []

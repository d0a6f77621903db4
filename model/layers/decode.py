"""The decode step over the static pool: context, attention, short conv and routed experts.

Every op here has static shapes and no host sync, so a decode step can be captured in a CUDA
graph. Layers dispatch here when their context is a :class:`DecodeContext` (attention, conv) or
while :func:`static_shapes` is on (routed experts, which take no context).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from inkling_model.layers.mlp import swiglu_interleaved

if TYPE_CHECKING:  # the pool is the runtime's (above the layers): named here, never imported
    from inkling_model.runtime.kv_pool import KVPool

_static: list[bool] = []


@contextlib.contextmanager
def static_shapes():
    """Routed experts take their capture-safe path (all k chosen experts gathered per token)."""
    _static.append(True)
    try:
        yield
    finally:
        _static.pop()


def static_on() -> bool:
    return bool(_static)


@dataclass
class DecodeContext:
    """One decode step: a token per request at ``positions [B]`` of pool ``slots [B]`` (static views)."""

    pool: KVPool
    slots: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int64
    step_meta: dict = field(default_factory=dict)  # how the step runs, stored with its probes (graphs.py)

    @property
    def seq_lens(self) -> list[int]:
        return [1] * self.slots.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.slots.shape[0]

    def cache(self, i: int):
        return None

    def advance(self) -> None:
        """Positions live in the runtime's static buffer; the runtime moves them."""


def decode_conv(conv, x: torch.Tensor, ctx: DecodeContext) -> torch.Tensor:
    """ShortConv for one token per request, reading and updating the slot's state."""
    state = ctx.pool.conv[(conv.layer_idx, conv.name)]  # [S+1, K-1, C]
    xf = x.float()  # [B, C]
    xin = torch.cat([state[ctx.slots], xf[:, None]], 1)  # [B, K, C]
    state[ctx.slots] = xin[:, 1:]
    y = F.conv1d(xin.transpose(1, 2), conv.weight, groups=conv.channels)[:, :, 0]  # [B, C]
    return (y + xf).to(x.dtype)


def decode_attention(attn, q, k, v, r, ctx: DecodeContext) -> torch.Tensor:
    """Attention of one query per request over its slot's cached keys; q [B, nh, hd] -> [B, nh, hd]."""
    pool, layer, p = ctx.pool, attn.layer_idx, ctx.positions
    idx = pool.index(layer, p)  # [B]
    pool.k[layer][ctx.slots, idx] = k  # k [B, nkv, hd]
    pool.v[layer][ctx.slots, idx] = v
    k_pos = pool.key_positions(layer, p)  # [B, Lc]
    dist = p[:, None] - k_pos  # [B, Lc]
    bias = _rel_bias(attn.rel_logits_proj, r, dist)  # [B, nh, Lc]
    if attn.log_floor is not None:
        tau = 1.0 + attn.log_alpha * torch.log(((p + 1).float() / attn.log_floor).clamp(min=1.0))
        tau = tau.view(-1, 1, 1)  # [B, 1, 1]
        q = (q.float() * tau).to(q.dtype)
        bias = (bias.float() * tau).to(bias.dtype)
    kh = pool.k[layer][ctx.slots].transpose(1, 2).repeat_interleave(attn.groups, dim=1)  # [B, nh, Lc, hd]
    vh = pool.v[layer][ctx.slots].transpose(1, 2).repeat_interleave(attn.groups, dim=1)  # [B, nh, Lc, hd]
    scores = torch.matmul(q[:, :, None], kh.transpose(-1, -2))[:, :, 0] * attn.scale + bias  # [B, nh, Lc]
    allowed = (dist >= 0) & (k_pos >= 0)
    if attn.window is not None:
        allowed = allowed & (dist < attn.window)
    scores = scores.masked_fill(~allowed[:, None], torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # [B, nh, Lc]
    return torch.matmul(probs[:, :, None], vh)[:, :, 0]  # [B, nh, hd]


def _rel_bias(rel_proj, r: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    """bias[b, h, j] = (r[b, h] @ proj)[dist[b, j]], zero outside 0 <= dist < extent."""
    rel = r @ rel_proj.proj  # [B, nh, extent]
    idx = dist.clamp(0, rel_proj.extent - 1)[:, None].expand(-1, rel.shape[1], -1)  # [B, nh, Lc]
    bias = rel.gather(-1, idx)
    return bias.masked_fill(((dist < 0) | (dist >= rel_proj.extent))[:, None], 0.0)


def routed_static(experts, x: torch.Tensor, topk_idx: torch.Tensor, topk_w: torch.Tensor) -> torch.Tensor:
    """RoutedExperts.forward without data-dependent shapes: each token's k experts, gathered.

    Sums in ascending expert order per token (as the eager loop's index_add does); [T, H] partial.
    """
    local = topk_idx - experts.first_expert  # [T, k]
    local, order = local.sort(-1)
    w = topk_w.gather(-1, order)  # [T, k]
    valid = (local >= 0) & (local < experts.num_experts)
    e = local.clamp(0, experts.num_experts - 1)
    h = torch.matmul(experts.w13_weight[e], x[:, None, :, None])[..., 0]  # [T, k, 2I]
    y = torch.matmul(experts.w2_weight[e], swiglu_interleaved(h)[..., None])[..., 0]  # [T, k, H]
    y = y * (w * valid)[..., None].to(y.dtype)
    out = torch.zeros_like(x)  # [T, H]
    for j in range(y.shape[1]):
        out = out + y[:, j]
    return out

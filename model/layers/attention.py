"""Inkling attention (full and sliding): no RoPE, short convs on k and v, per-head q/k RMSNorm,
scale 1/head_dim, the relative-position bias from r, optional log scaling on full layers.

Heads are split over the attention group (``tp.attn``): wq_du/wk_dv/wv_dv/wr_du are column-parallel
by heads, wo_ud row-parallel with its own all-reduce.
"""

from __future__ import annotations


import torch
from torch import nn

import inkling_probe
from inkling_model.switches import faults
from inkling_model.layers.context import StepContext
from inkling_model.layers.conv import ShortConv
from inkling_model.layers.linear import ColumnParallelLinear, RowParallelLinear
from inkling_model.layers.loading import make_param, replicated_loader
from inkling_model.layers.norm import RMSNorm
from inkling_model.parallel import Parallel, divide


class RelativeLogits(nn.Module):
    """bias[b, h, q, k] = (r[b, q, h] @ proj)[dist[b, q, k]], zero outside 0 <= dist < extent."""

    def __init__(self, d_rel: int, extent: int):
        super().__init__()
        self.extent = extent
        self.proj = make_param((d_rel, extent), replicated_loader)

    def forward(self, r: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
        rel = (r @ self.proj).transpose(1, 2)  # [B, nh, tq, extent]
        idx = dist.clamp(0, self.extent - 1)[:, None].expand(-1, rel.shape[1], -1, -1)  # [B, nh, tq, tk]
        bias = rel.gather(-1, idx)  # [B, nh, tq, tk]
        return bias.masked_fill(((dist < 0) | (dist >= self.extent))[:, None], 0.0)


class Attention(nn.Module):
    """One layer's attention; ``forward(x [T, H], ctx) -> [T, H]`` (replicated, after the reduce)."""

    def __init__(self, config, layer_idx: int, tp: Parallel):
        super().__init__()
        g, self.tp = tp.attn, tp
        self.layer_idx, self.prefix = layer_idx, f"layers.{layer_idx}.attn"
        self.total_num_heads, self.total_num_kv_heads, self.head_dim, extent, self.window = config.attn_dims(layer_idx)
        if self.total_num_kv_heads % g.size:
            raise ValueError(f"layer {layer_idx}: {self.total_num_kv_heads} kv heads do not split over "
                             f"an attention group of {g.size} (kv-head replication is not supported)")
        self.num_heads = divide(self.total_num_heads, g.size)
        self.num_kv_heads = divide(self.total_num_kv_heads, g.size)
        self.groups = divide(self.num_heads, self.num_kv_heads)
        self.d_rel, self.scale = config.d_rel, 1.0 / self.head_dim
        self.log_floor = None if self.window is not None else config.log_scaling_n_floor
        self.log_alpha = config.log_scaling_alpha
        h, kv, k = config.hidden_size, self.total_num_kv_heads * self.head_dim, config.conv_kernel_size
        self.wq_du = ColumnParallelLinear(h, self.total_num_heads * self.head_dim, g)
        self.wk_dv = ColumnParallelLinear(h, kv, g)
        self.wv_dv = ColumnParallelLinear(h, kv, g)
        self.wr_du = ColumnParallelLinear(h, self.total_num_heads * config.d_rel, g)
        self.wo_ud = RowParallelLinear(self.total_num_heads * self.head_dim, h, g, name=f"{self.prefix}.o_proj")
        self.k_sconv = ShortConv(kv, k, layer_idx, "k", g)
        self.v_sconv = ShortConv(kv, k, layer_idx, "v", g)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.rel_logits_proj = RelativeLogits(config.d_rel, extent)

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        p, T = self.prefix, x.shape[0]
        q = self.q_norm(self.wq_du(x).view(T, self.num_heads, self.head_dim))  # [T, nh, hd]
        k = self.k_norm(self.k_sconv(self.wk_dv(x), ctx).view(T, self.num_kv_heads, self.head_dim))  # [T, nkv, hd]
        v = self.v_sconv(self.wv_dv(x), ctx)  # [T, nkv*hd]
        r = self.wr_du(x)  # [T, nh*d_rel]
        inkling_probe.probe(f"{p}.q", q, shard="concat", dim=1)
        inkling_probe.probe(f"{p}.k", k, shard="concat", dim=1)
        inkling_probe.probe(f"{p}.v", v, shard="concat", dim=1)
        inkling_probe.probe(f"{p}.r", r, shard="concat", dim=1)
        v = v.view(T, self.num_kv_heads, self.head_dim)
        r = r.view(T, self.num_heads, self.d_rel)
        if ctx.is_decode:
            out = self._decode(q, k, v, r, ctx)  # [T, nh, hd]
        else:
            segs = zip(q.split(ctx.seq_lens), k.split(ctx.seq_lens), v.split(ctx.seq_lens), r.split(ctx.seq_lens))
            out = torch.cat([self._prefill(i, *s, ctx) for i, s in enumerate(segs)])  # [T, nh, hd]
        if self.tp.dp_size > 1 and faults.is_active("adp_global_tp_size"):
            out[:, divide(self.total_num_heads, self.tp.world.size):] = 0  # heads the kernel never wrote
        out = out.reshape(T, self.num_heads * self.head_dim)  # [T, nh*hd]
        inkling_probe.probe(f"{p}.out", out, shard="concat", dim=1)
        o = self.wo_ud(out, reduce=False)  # [T, H] partial
        o = self.wo_ud.reduce(o)
        inkling_probe.probe(f"{p}.o_proj", o)
        return o

    def _prefill(self, i, q, k, v, r, ctx: StepContext) -> torch.Tensor:
        """Request i's tokens (q [tq, nh, hd]) over its past keys in the pool and its own; writes its
        keys/values into its slot."""
        start, tq = ctx.start_pos(i), q.shape[0]
        cache = ctx.cache(i)
        if cache is not None:
            pk, pv = cache.pool.past(self.layer_idx, cache.slot, start)  # [n, nkv, hd]
            cache.pool.write(self.layer_idx, cache.slot, start, k, v)
            k, v = torch.cat([pk, k]), torch.cat([pv, v])  # [tk, nkv, hd]
        q_pos = torch.arange(tq, device=q.device) + start  # [tq]
        k_pos = torch.arange(k.shape[0], device=q.device) + (start + tq - k.shape[0])  # [tk]
        out, bias = self._attend(q[None], k[None], v[None], r[None], q_pos[None], k_pos[None])
        if len(ctx.seq_lens) == 1 and self.tp.dp_size == 1 and inkling_probe.enabled():
            inkling_probe.probe(f"{self.prefix}.scores_bias", bias[0], shard="concat", dim=0, token_dim=1)
        return out[0]  # [tq, nh, hd]

    def _decode(self, q, k, v, r, ctx: StepContext) -> torch.Tensor:
        """One query per request (q [B, nh, hd]) over its slot's keys; static shapes, no host sync."""
        pool, layer, p = ctx.pool, self.layer_idx, ctx.positions
        pool.write_step(layer, ctx.slots, p, k, v)
        k_pos = pool.key_positions(layer, p)  # [B, Lc]
        kc, vc = pool.k[layer][ctx.slots], pool.v[layer][ctx.slots]  # [B, Lc, nkv, hd]
        out, bias = self._attend(q[:, None], kc, vc, r[:, None], p[:, None], k_pos, k_pos >= 0)
        if ctx.mode == "eager" and len(ctx.seq_lens) == 1 and self.tp.dp_size == 1 and inkling_probe.enabled():
            self._probe_decode_bias(bias[0], k_pos[0], int(p[0]))
        return out[:, 0]  # [B, nh, hd]

    def _probe_decode_bias(self, bias: torch.Tensor, k_pos: torch.Tensor, p: int) -> None:
        """scores_bias of a plain (eager, one-request) decode step as prefill records it: [nh, 1, tk]
        over the keys the query sees, oldest first (a host sync: never in a static step)."""
        first = 0 if self.window is None else max(0, p - self.window + 1)
        order = torch.argsort(k_pos)
        order = order[(k_pos[order] >= first) & (k_pos[order] <= p)]  # [tk]
        inkling_probe.probe(f"{self.prefix}.scores_bias", bias[:, :, order], shard="concat", dim=0, token_dim=1)

    def _attend(self, q, k, v, r, q_pos, k_pos, k_valid=None):
        """The attention kernel of both branches: q [B, tq, nh, hd] over k, v [B, tk, nkv, hd] with the
        relative bias from r [B, tq, nh, d_rel], causal (and windowed) by positions q_pos [B, tq],
        k_pos [B, tk]; ``k_valid [B, tk]`` masks cache entries never written. -> ([B, tq, nh, hd], the bias before
        log scaling)."""
        dist = q_pos[:, :, None] - k_pos[:, None, :]  # [B, tq, tk]
        raw = bias = self.rel_logits_proj(r, dist)  # [B, nh, tq, tk]
        q = q.transpose(1, 2)  # [B, nh, tq, hd]
        if self.log_floor is not None:
            tau = 1.0 + self.log_alpha * torch.log(((q_pos + 1).float() / self.log_floor).clamp(min=1.0))
            tau = tau[:, None, :, None]  # [B, 1, tq, 1]
            q = (q.float() * tau).to(q.dtype)
            bias = (bias.float() * tau).to(bias.dtype)
        kh = k.transpose(1, 2).repeat_interleave(self.groups, dim=1)  # [B, nh, tk, hd]
        vh = v.transpose(1, 2).repeat_interleave(self.groups, dim=1)  # [B, nh, tk, hd]
        scores = torch.matmul(q, kh.transpose(-1, -2)) * self.scale + bias  # [B, nh, tq, tk]
        allowed = dist >= 0
        if self.window is not None:
            allowed = allowed & (dist < self.window)
        if k_valid is not None:
            allowed = allowed & k_valid[:, None, :]
        scores = scores.masked_fill(~allowed[:, None], torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # [B, nh, tq, tk]
        return torch.matmul(probs, vh).transpose(1, 2), raw  # [B, tq, nh, hd]

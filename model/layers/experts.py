"""Routed experts (bf16/fp32) as stacked [E, out, in] parameters.

Sharded over the MoE group (``tp.moe``, every rank) by intermediate size: w13 [E, 2I/tp, H] (a
contiguous row block of interleaved w13 keeps its gate/up pairs), w2 [E, H, I/tp]. With
``tp.expert_parallel`` whole experts are split instead: w13 [E/tp, 2I, H], w2 [E/tp, H, I].
Either way ``forward`` returns this rank's partial sum; the MoE reduces it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model.layers import decode
from inkling_model.layers.loading import make_param, shard_loader
from inkling_model.layers.mlp import swiglu_interleaved
from inkling_model.parallel import Parallel, divide


class RoutedExperts(nn.Module):
    """``forward(x [T, H], topk_idx [T, k], topk_w [T, k]) -> [T, H]`` (this rank's partial sum)."""

    def __init__(self, config, layer_idx: int, tp: Parallel):
        super().__init__()
        g, h = tp.moe, config.hidden_size
        self.layer_idx = layer_idx
        self.total_num_experts, self.total_intermediate = config.n_routed_experts, config.moe_intermediate_size
        if tp.expert_parallel:
            self.num_experts, self.intermediate = divide(self.total_num_experts, g.size), self.total_intermediate
            self.first_expert = g.rank * self.num_experts
            l13 = l2 = shard_loader(0, g.rank, g.size)
        else:
            self.num_experts, self.first_expert = self.total_num_experts, 0
            self.intermediate = divide(self.total_intermediate, g.size)
            l13, l2 = shard_loader(1, g.rank, g.size), shard_loader(2, g.rank, g.size)
        self.w13_weight = make_param((self.num_experts, 2 * self.intermediate, h), l13)
        self.w2_weight = make_param((self.num_experts, h, self.intermediate), l2)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Local expert e on its tokens: w2 (silu(gate) * up)."""
        return F.linear(swiglu_interleaved(F.linear(x, self.w13_weight[e])), self.w2_weight[e])  # [n, H]

    def forward(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_w: torch.Tensor) -> torch.Tensor:
        if decode.static_on():  # graph-capturable decode path
            return decode.routed_static(self, x, topk_idx, topk_w)
        out = torch.zeros_like(x)  # [T, H]
        local = topk_idx - self.first_expert  # [T, k]
        for e in torch.unique(local).tolist():  # ascending, as transformers' loop
            if not 0 <= e < self.num_experts:
                continue
            tok, slot = torch.where(local == e)
            y = self.expert(e, x[tok]) * topk_w[tok, slot, None]  # [n, H]
            out.index_add_(0, tok, y.to(out.dtype))
        return out

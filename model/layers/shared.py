"""Shared experts: sum_s gamma_s * SwiGLU_s(x), the sum over s in fp32 (as transformers)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model.layers.loading import make_param, shard_loader
from inkling_model.layers.mlp import swiglu_interleaved
from inkling_model.parallel import Parallel, divide


class SharedExperts(nn.Module):
    """Stacked shared experts split over the attention group by intermediate size; returns a partial sum."""

    def __init__(self, config, layer_idx: int, tp: Parallel):
        super().__init__()
        g, h, s = tp.attn, config.hidden_size, config.n_shared_experts
        self.total_intermediate = config.moe_intermediate_size
        self.intermediate = divide(self.total_intermediate, g.size)
        self.shared_w13_weight = make_param((s, 2 * self.intermediate, h), shard_loader(1, g.rank, g.size))
        self.shared_w2_weight = make_param((s, h, self.intermediate), shard_loader(2, g.rank, g.size))

    def forward(self, x: torch.Tensor, gammas: torch.Tensor) -> torch.Tensor:
        outs = []
        for s in range(self.shared_w13_weight.shape[0]):
            a = swiglu_interleaved(F.linear(x, self.shared_w13_weight[s])) * gammas[:, s, None]  # [T, I/tp]
            outs.append(F.linear(a, self.shared_w2_weight[s]))  # [T, H]
        return torch.stack(outs).float().sum(0).to(x.dtype)  # [T, H] partial

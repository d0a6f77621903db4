"""The dense MLP: down(silu(gate) * up) * global_scale, with interleaved w13 (gate even rows, up odd)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import inkling_probe
from inkling_model.switches import faults
from inkling_model.layers.compile_faults import swiglu_through_op
from inkling_model.layers.linear import ColumnParallelLinear, RowParallelLinear
from inkling_model.layers.loading import make_param, replicated_loader
from inkling_model.parallel import Parallel


def swiglu_interleaved(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for interleaved rows [g0, u0, g1, u1, ...] on the last dim."""
    return F.silu(h[..., 0::2]) * h[..., 1::2]  # [..., I]


class DenseMLP(nn.Module):
    """Dense MLP split over the attention group by intermediate size (row shards of w13 stay paired)."""

    def __init__(self, config, layer_idx: int, tp: Parallel):
        super().__init__()
        g, h, inter = tp.attn, config.hidden_size, config.intermediate_size
        self.tp, self.prefix = tp, f"layers.{layer_idx}.mlp"
        self.w13_dn = ColumnParallelLinear(h, 2 * inter, g)
        self.w2_md = RowParallelLinear(inter, h, g, name=f"{self.prefix}.out")
        self.global_scale = make_param((1,), replicated_loader)

    def forward(self, x: torch.Tensor, ctx=None) -> torch.Tensor:
        """``ctx`` is unused (the MoE's dispatch depends on it; the dense MLP's math does not)."""
        h = self.w13_dn(x)
        act = swiglu_through_op(h) if faults.is_active("fake_kernel_dtype") else swiglu_interleaved(h)
        y = self.w2_md(act, reduce=False)  # [T, H] partial
        if self.tp.dp_size > 1 and faults.is_active("adp_dense_allreduce"):
            y = _reduce_over_world(y, self.tp)
        else:
            y = self.w2_md.reduce(y)
        y = y * self.global_scale
        inkling_probe.probe(f"{self.prefix}.out", y)
        return y


def _reduce_over_world(y: torch.Tensor, tp: Parallel) -> torch.Tensor:
    """Planted fault ``adp_dense_allreduce``: rows padded to the longest DP group, summed over every
    rank (other requests' rows included), own rows kept."""
    n = y.shape[0]
    longest = max(tp.dp_peers.all_gather_sizes(n, y.device))
    padded = F.pad(y, (0, 0, 0, longest - n))  # [Tmax, H]
    return tp.world.all_reduce(padded)[:n]

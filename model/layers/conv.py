"""The short convolution: depthwise causal conv1d (kernel 4, no bias) in fp32 with its own residual."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model.layers.context import StepContext
from inkling_model.layers.loading import make_param, replicated_loader, shard_loader
from inkling_model.parallel import Group, divide


class ShortConv(nn.Module):
    """y = conv(x) + x per channel, causal within each request; a request's last kernel-1 inputs are
    kept in its pool slot (``pool.conv[(layer_idx, name)]``) for the next forward.

    ``group`` None: channels replicated (the hidden-size convs); else channels split like the
    column-parallel projection feeding it (the k/v convs).
    """

    def __init__(self, channels: int, kernel: int, layer_idx: int, name: str, group: Group | None = None):
        super().__init__()
        self.layer_idx, self.name, self.kernel = layer_idx, name, kernel
        self.total_channels = channels
        if group is None:
            self.channels, loader = channels, replicated_loader
        else:
            self.channels, loader = divide(channels, group.size), shard_loader(0, group.rank, group.size)
        self.weight = make_param((self.channels, 1, kernel), loader, torch.float32)

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if ctx.is_decode:  # one token per slot, static shapes
            states = ctx.pool.conv[(self.layer_idx, self.name)]  # [S+1, K-1, C]
            y, states[ctx.slots] = self._conv(states[ctx.slots], x[:, None])  # [B, 1, C], [B, K-1, C]
            return y[:, 0]  # [B, C]
        outs = [self._prefill(seg, ctx.cache(i)) for i, seg in enumerate(x.split(ctx.seq_lens))]
        return torch.cat(outs)  # [T, C]

    def _prefill(self, x: torch.Tensor, cache) -> torch.Tensor:
        if cache is None:
            state = x.new_zeros(1, self.kernel - 1, self.channels, dtype=torch.float32)  # [1, K-1, C]
        else:
            state = cache.pool.conv[(self.layer_idx, self.name)][cache.slot][None]  # zeros for a new slot
        y, new = self._conv(state, x[None])  # [1, t, C], [1, K-1, C]
        if cache is not None:
            cache.pool.conv[(self.layer_idx, self.name)][cache.slot] = new[0]
        return y[0]

    def _conv(self, state: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel of both branches: x [B, t, C] after the fp32 inputs state [B, K-1, C];
        -> (y [B, t, C] in x's dtype, the last K-1 inputs [B, K-1, C])."""
        xf = x.float()  # [B, t, C]
        xin = torch.cat([state, xf], 1)  # [B, K-1+t, C]
        y = F.conv1d(xin.transpose(1, 2), self.weight, groups=self.channels).transpose(1, 2)  # [B, t, C]
        return (y + xf).to(x.dtype), xin[:, -(self.kernel - 1):]  # a view: the caller copies it into the pool

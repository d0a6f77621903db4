"""The short convolution: depthwise causal conv1d (kernel 4, no bias) in fp32 with its own residual."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model.layers.context import ForwardContext
from inkling_model.layers.loading import make_param, replicated_loader, shard_loader
from inkling_model.parallel import Group, divide
from inkling_model.layers.decode import decode_conv


class ShortConv(nn.Module):
    """y = conv(x) + x per channel, causal within each request; decode keeps kernel-1 inputs.

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

    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        if getattr(ctx, "pool", None) is not None:  # decode over the static pool (model/layers/decode.py)
            return decode_conv(self, x, ctx)
        outs = [self._one(seg, ctx.cache(i)) for i, seg in enumerate(x.split(ctx.seq_lens))]
        return torch.cat(outs)  # [T, C]

    def _one(self, x: torch.Tensor, cache) -> torch.Tensor:
        xf = x.float()  # [t, C]
        state = None
        if cache is not None:
            state = cache.layers[self.layer_idx].conv.get(self.name)
        if state is None:
            state = xf.new_zeros(self.kernel - 1, self.channels)  # [K-1, C]
        xin = torch.cat([state, xf])  # [K-1+t, C]
        if cache is not None:
            cache.layers[self.layer_idx].conv[self.name] = xin[-(self.kernel - 1):].clone()
        y = F.conv1d(xin.t().unsqueeze(0), self.weight, groups=self.channels)[0].t()  # [t, C]
        return (y + xf).to(x.dtype)

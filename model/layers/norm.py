"""RMSNorm as transformers' InklingRMSNorm computes it (fp32 statistics, weight in model dtype)."""

from __future__ import annotations

import torch
from torch import nn

from inkling_model.layers.loading import make_param, replicated_loader


class RMSNorm(nn.Module):
    """y = weight * (x / sqrt(mean(x^2) + eps)), normalised in fp32 and cast back before the weight."""

    def __init__(self, size: int, eps: float, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = make_param((size,), replicated_loader, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)

"""Weight loaders: copy this rank's shard of a FULL checkpoint tensor into a parameter."""

from __future__ import annotations

import torch
from torch import nn


def _copy(param: nn.Parameter, src: torch.Tensor) -> None:
    if tuple(src.shape) != tuple(param.shape):
        raise ValueError(f"shard shape {tuple(src.shape)} != parameter shape {tuple(param.shape)}")
    if param.device.type == "meta":
        return
    with torch.no_grad():
        param.copy_(src.to(param.dtype))


def replicated_loader(param: nn.Parameter, full: torch.Tensor) -> None:
    """Every rank holds the whole tensor."""
    _copy(param, full)


def shard_loader(dim: int, rank: int, size: int):
    """A loader taking contiguous block ``rank`` of ``size`` along ``dim`` of the full tensor."""
    def load(param: nn.Parameter, full: torch.Tensor) -> None:
        n = full.shape[dim]
        if n % size:
            raise ValueError(f"full dim {dim} of size {n} does not split into {size} shards")
        _copy(param, full.narrow(dim, rank * (n // size), n // size))
    return load


def make_param(shape, loader, dtype=None) -> nn.Parameter:
    """An uninitialised parameter (on the current default device) carrying ``weight_loader``."""
    p = nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    p.weight_loader = loader
    return p

"""Column- and row-parallel linears (no bias), after nano-vllm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model import allreduce
from inkling_model.layers.loading import make_param, shard_loader
from inkling_model.parallel import Group, divide


class ColumnParallelLinear(nn.Module):
    """y = x W^T with W's output rows split over ``group``: this rank returns its output columns."""

    def __init__(self, in_features: int, out_features: int, group: Group, dtype=None):
        super().__init__()
        self.in_features, self.total_out_features = in_features, out_features
        self.out_features = divide(out_features, group.size)
        self.weight = make_param((self.out_features, in_features), shard_loader(0, group.rank, group.size), dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)  # [T, out/tp]


class RowParallelLinear(nn.Module):
    """y = x W^T with W's input columns split over ``group``; sums the partial outputs itself.

    ``forward(x, reduce=False)`` returns this rank's partial sum, for a caller that probes it first
    and then calls :meth:`reduce`. ``name``: the probe key after the reduce, which selects the
    all-reduce strategy (model/allreduce.py).
    """

    def __init__(self, in_features: int, out_features: int, group: Group, dtype=None, name: str = ""):
        super().__init__()
        self.group, self.name = group, name
        self.total_in_features, self.out_features = in_features, out_features
        self.in_features = divide(in_features, group.size)
        self.weight = make_param((out_features, self.in_features), shard_loader(1, group.rank, group.size), dtype)

    def forward(self, x: torch.Tensor, reduce: bool = True) -> torch.Tensor:
        y = F.linear(x, self.weight)  # [T, out] partial
        return self.reduce(y) if reduce else y

    def reduce(self, y: torch.Tensor) -> torch.Tensor:
        """All-reduce a partial output over the group."""
        return allreduce.all_reduce(y, self.group, self.name)

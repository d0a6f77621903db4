"""Vocab-parallel embedding and LM head: vocabulary rows split over the group."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model import allreduce
from inkling_model.layers.loading import make_param, shard_loader
from inkling_model.parallel import Group, divide


class VocabParallelEmbedding(nn.Module):
    """Embedding whose rows [rank*V/tp, (rank+1)*V/tp) live on this rank; all-reduces the lookup."""

    def __init__(self, vocab_size: int, hidden: int, group: Group, dtype=None):
        super().__init__()
        self.group = group
        self.total_vocab_size = vocab_size
        self.vocab_size = divide(vocab_size, group.size)
        self.start = group.rank * self.vocab_size
        self.weight = make_param((self.vocab_size, hidden), shard_loader(0, group.rank, group.size), dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.group.size == 1:
            return F.embedding(ids, self.weight)  # [T, H]
        local = ids - self.start
        inside = (local >= 0) & (local < self.vocab_size)  # [T]
        y = F.embedding(local.clamp(0, self.vocab_size - 1), self.weight)  # [T, H]
        y = y * inside.unsqueeze(-1).to(y.dtype)
        return allreduce.all_reduce(y, self.group, "embed")


class ParallelLMHead(nn.Module):
    """logits = x W^T with W's vocabulary rows split over the group; gathers the full vocabulary.

    ``forward(x, gather=False)`` returns this rank's vocabulary slice [T, V/tp].
    """

    def __init__(self, vocab_size: int, hidden: int, group: Group, dtype=None):
        super().__init__()
        self.group = group
        self.total_vocab_size = vocab_size
        self.vocab_size = divide(vocab_size, group.size)
        self.weight = make_param((self.vocab_size, hidden), shard_loader(0, group.rank, group.size), dtype)

    def forward(self, x: torch.Tensor, gather: bool = True) -> torch.Tensor:
        logits = F.linear(x, self.weight)  # [T, V/tp]
        return self.group.all_gather(logits, dim=-1) if gather else logits  # [T, V]

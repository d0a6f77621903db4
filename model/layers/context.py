"""Per-forward metadata and the per-request decode cache (KV and short-conv states).

A forward runs on the flattened new tokens of one or more requests (``seq_lens`` of them each).
With caches, request i's tokens continue at position ``caches[i].length``; layers append their
keys/values and conv states to it, and the model advances ``length`` after the forward. The cache
is deliberately simple (growing tensors, one per request and layer); CUDA graphs come later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerCache:
    """One request's state for one layer."""

    k: torch.Tensor | None = None  # [L, kv_heads, head_dim] (after conv and k_norm)
    v: torch.Tensor | None = None  # [L, kv_heads, head_dim]
    conv: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [kernel-1, C] fp32 inputs


class RequestCache:
    """Everything one request keeps between forwards."""

    def __init__(self, num_layers: int):
        self.length = 0
        self.layers = [LayerCache() for _ in range(num_layers)]

    def append_kv(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this forward's keys/values; returns all keys/values of the request so far."""
        lc = self.layers[layer]
        lc.k = k if lc.k is None else torch.cat([lc.k, k])
        lc.v = v if lc.v is None else torch.cat([lc.v, v])
        return lc.k, lc.v

    def trim_kv(self, layer: int, keep: int) -> None:
        """Keep only the last ``keep`` keys/values of a layer (sliding window)."""
        lc = self.layers[layer]
        lc.k, lc.v = lc.k[-keep:], lc.v[-keep:]


@dataclass
class ForwardContext:
    """Metadata of one forward: tokens per request, their caches (None: no cache, start at 0) and
    their global request ids (attention-DP: what the probes declare; -1 marks a padding request)."""

    seq_lens: list[int]
    caches: list[RequestCache] | None = None
    request_ids: list[int] | None = None

    def __post_init__(self):
        if self.caches is not None and len(self.caches) != len(self.seq_lens):
            raise ValueError(f"{len(self.caches)} caches for {len(self.seq_lens)} requests")
        if self.request_ids is not None and len(self.request_ids) != len(self.seq_lens):
            raise ValueError(f"{len(self.request_ids)} request ids for {len(self.seq_lens)} requests")

    @classmethod
    def single(cls, num_tokens: int) -> "ForwardContext":
        """One request, no cache."""
        return cls([num_tokens])

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lens)

    def start_pos(self, i: int) -> int:
        """Position of request i's first token in this forward."""
        return self.caches[i].length if self.caches is not None else 0

    def cache(self, i: int) -> RequestCache | None:
        return self.caches[i] if self.caches is not None else None

    def positions(self, device=None) -> torch.Tensor:
        """Absolute position of every token, flattened in request order."""
        return torch.cat([torch.arange(n, device=device) + self.start_pos(i) for i, n in enumerate(self.seq_lens)])

    def advance(self) -> None:
        """Move every cache past this forward's tokens (called by the model after its layers)."""
        if self.caches is not None:
            for c, n in zip(self.caches, self.seq_lens):
                c.length += n

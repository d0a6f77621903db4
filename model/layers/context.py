"""The one step context: per-forward metadata, and the request handles into the KV pool.

A forward runs on the flattened new tokens of one or more requests (``seq_lens`` of them each).
With caches, request i is a :class:`RequestCache`: a slot of the KV pool (layers/kv_cache.py)
and the number of tokens it holds; its tokens continue at position ``length``, each layer writes
their keys/values and conv states straight into the slot, and the model advances ``length`` after
the forward. There is one cache: prefill, plain decode and the runtime (eager or graphs) all use
pool slots.

A step is a *decode* step (``is_decode``) when it holds a pool, ``slots [B]`` and
``positions [B]`` (one token per request): layers then take their decode branch, whose shapes are
static (capturable in a CUDA graph). :meth:`StepContext.for_decode` builds one from tensors (the
runtime's static buffers); a context built from caches of one pool with one token each is one too.
``mode`` says how the step is run (``eager``, ``static-eager`` or ``graph``, ``graph_bs`` rows).
A *padded* decode step (the graph runner's: rows padded to a captured batch size) also holds
``valid_rows``, a [1] device tensor: its first ``valid_rows`` rows are real, the rest padding. Under
attention-DP the MoE then gathers every group's rows with fixed sizes (layers/moe.py), no host sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inkling_probe.removed import module_getattr

FORWARD_MODES = ("eager", "static-eager", "graph")


class RequestCache:
    """One request's state: ``slot`` of ``pool`` holding its first ``length`` tokens."""

    def __init__(self, pool, slot: int, length: int = 0):  # pool: a KVPool (kv_cache.py, which imports this)
        self.pool, self.slot, self.length = pool, slot, length


@dataclass
class StepContext:
    """Metadata of one forward: tokens per request, their caches (None: no cache, start at 0), their
    global request ids (attention-DP: what the probes declare; -1 marks a padding request), and for a
    decode step the pool with ``slots [B]`` and ``positions [B]`` (module docstring)."""

    seq_lens: list[int]
    caches: list[RequestCache] | None = None
    request_ids: list[int] | None = None
    pool: object = None  # the KVPool (kv_cache.py) of a decode step
    slots: torch.Tensor | None = None  # [B] int64, decode steps only
    positions: torch.Tensor | None = None  # [B] int64, decode steps only
    mode: str = "eager"
    graph_bs: int | None = None
    valid_rows: torch.Tensor | None = None  # [1] int64 on the device, padded decode steps only

    def __post_init__(self):
        if self.caches is not None and len(self.caches) != len(self.seq_lens):
            raise ValueError(f"{len(self.caches)} caches for {len(self.seq_lens)} requests")
        if self.request_ids is not None and len(self.request_ids) != len(self.seq_lens):
            raise ValueError(f"{len(self.request_ids)} request ids for {len(self.seq_lens)} requests")
        for c, n in zip(self.caches or (), self.seq_lens):
            if c.length + n > c.pool.max_len:
                raise ValueError(f"request of {c.length + n} tokens exceeds the pool's max_len {c.pool.max_len}")
        if self.mode not in FORWARD_MODES:
            raise ValueError(f"forward mode {self.mode!r}: expected one of {', '.join(FORWARD_MODES)}")
        if self.pool is None and self.caches and all(n == 1 for n in self.seq_lens):
            pools = {id(c.pool) for c in self.caches}
            if len(pools) == 1:  # one token per request, one pool: the decode branch
                self.pool = self.caches[0].pool
                self.slots = torch.tensor([c.slot for c in self.caches], device=self.pool.device)
                self.positions = torch.tensor([c.length for c in self.caches], device=self.pool.device)

    @classmethod
    def single(cls, num_tokens: int) -> "StepContext":
        """One request, no cache."""
        return cls([num_tokens])

    @classmethod
    def for_decode(cls, pool, slots: torch.Tensor, positions: torch.Tensor,
                   request_ids: list[int] | None = None, mode: str = "static-eager",
                   graph_bs: int | None = None, valid_rows: torch.Tensor | None = None) -> "StepContext":
        """A decode step over static views: a token per request at ``positions [B]`` of ``slots [B]``
        (``valid_rows [1]``: a padded step, of which only the first rows are real)."""
        return cls([1] * slots.shape[0], None, request_ids, pool, slots, positions, mode, graph_bs, valid_rows)

    @property
    def is_decode(self) -> bool:
        return self.slots is not None

    @property
    def step_meta(self) -> dict:
        """How the step runs, stored with each of its probes (``forward``, and ``graph_bs`` in a graph)."""
        return {"forward": self.mode} if self.graph_bs is None else {"forward": self.mode, "graph_bs": self.graph_bs}

    @property
    def num_tokens(self) -> int:
        return sum(self.seq_lens)

    def start_pos(self, i: int) -> int:
        """Position of request i's first token in this forward."""
        return self.caches[i].length if self.caches is not None else 0

    def cache(self, i: int) -> RequestCache | None:
        return self.caches[i] if self.caches is not None else None

    def advance(self) -> None:
        """Move every cache past this forward's tokens (called by the model after its layers); a
        context of static views leaves positions to the runtime that owns them."""
        if self.caches is not None:
            for c, n in zip(self.caches, self.seq_lens):
                c.length += n


__getattr__ = module_getattr(__name__, {"ForwardContext": "inkling_model.layers.context.StepContext"})

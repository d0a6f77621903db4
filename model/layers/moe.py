"""The MoE block: router -> routed experts (+ shared experts with the router's gammas).

Routed experts are sharded over every rank (``tp.moe``). Under attention-DP each rank routes its
own requests, gathers the tokens of its dp peers so the expert shards see every request, reduces
over all ranks and keeps its own rows. Shared experts are split over the attention group only.
"""

from __future__ import annotations

import torch
from torch import nn

import inkling_probe
from inkling_model import allreduce
from inkling_model.layers.context import StepContext
from inkling_model.layers.experts import RoutedExperts
from inkling_model.layers.router import Router
from inkling_model.layers.shared import SharedExperts
from inkling_model.parallel import Parallel


class MoE(nn.Module):
    """``forward(x [T, H]) -> [T, H]`` replicated over the attention group."""

    def __init__(self, config, layer_idx: int, tp: Parallel):
        super().__init__()
        self.tp, self.prefix = tp, f"layers.{layer_idx}.mlp"
        self.gate = Router(config, layer_idx)
        self.experts = RoutedExperts(config, layer_idx, tp)  # bf16 or NVFP4 weights (config.expert_quant)
        self.shared_experts = SharedExperts(config, layer_idx, tp)

    def forward(self, x: torch.Tensor, ctx: StepContext | None = None) -> torch.Tensor:
        """``ctx``: a decode step takes the experts' gathered (static-shape) dispatch."""
        p = self.prefix
        logits, w, idx, gammas = self.gate(x)  # [T, E], [T, k], [T, k], [T, S]
        inkling_probe.probe(f"{p}.router_logits", logits)
        inkling_probe.probe(f"{p}.topk_idx", idx, kind="decision", scores=f"{p}.router_logits")
        inkling_probe.probe(f"{p}.topk_w", w)
        inkling_probe.probe(f"{p}.shared_gammas", gammas)
        routed = self._routed(x, idx, w, ctx is not None and ctx.is_decode)  # [T, H]
        shared = self.shared_experts(x, gammas)  # [T, H] partial over the attention group
        inkling_probe.probe(f"{p}.shared", shared, shard="partial")
        shared = allreduce.all_reduce(shared, self.tp.attn, f"{p}.shared")
        out = routed + shared
        inkling_probe.probe(f"{p}.out", out)
        return out

    def _routed(self, x, idx, w, gathered: bool) -> torch.Tensor:
        dp = self.tp.dp_peers
        if dp.size == 1:
            routed = self.experts(x, idx, w, gathered)  # [T, H] partial over every rank
            inkling_probe.probe(f"{self.prefix}.experts", routed, shard="partial")
            return allreduce.all_reduce(routed, self.tp.moe, f"{self.prefix}.experts")
        sizes = dp.all_gather_sizes(x.shape[0])
        pad = max(sizes) - x.shape[0]
        xs, idxs, ws = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (x, idx, w))
        xs, idxs, ws = (dp.all_gather(t, 0) for t in (xs, idxs, ws))  # [dp*Tmax, ...]
        keep = torch.cat([torch.arange(n) + r * max(sizes) for r, n in enumerate(sizes)])
        routed = self.experts(xs[keep], idxs[keep], ws[keep], gathered)  # [sum T, H] partial over every rank
        routed = self.tp.moe.all_reduce(routed)
        start = sum(sizes[: dp.rank])
        routed = routed[start: start + x.shape[0]]  # this rank's own requests
        inkling_probe.probe(f"{self.prefix}.experts", routed)
        return routed

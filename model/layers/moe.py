"""The MoE block: router -> routed experts (+ shared experts with the router's gammas).

Routed experts are sharded over every rank (``tp.moe``). Under attention-DP each rank routes its
own requests, gathers the tokens of its dp peers so the expert shards see every request, reduces
over all ranks and keeps its own rows. Shared experts are split over the attention group only.

The gather comes in two forms, one set of expert math:

- *sized* (prefill, eager decode): the groups' row counts are gathered to the host, each group's rows
  padded to the longest, gathered, the padding cut before the experts;
- *fixed* (a padded decode step: the graph runner's, ``ctx.valid_rows``; capturable): every group
  holds the same B rows (the batch size all groups agreed on before the step), so the gather has
  fixed sizes; each group's count of real rows is gathered as a device tensor and masks the padding:
  a padding row enters the experts as zeros with weight 0 and no expert (``PAD_EXPERT``), so it picks
  no expert and adds exactly zero, and, the gathered dispatch being per row, never touches a real row.

Both reduce over every rank through the all-reduce strategies (``layers.N.mlp.experts``). The two
forms reduce tensors of different sizes ([sum T, H], [dp*B, H]); a ring all-reduce over more than two
ranks may order a row's sum by its position, so they are bit-identical over two ranks, or with the
``oneshot`` strategy (a fixed rank-order sum), and not otherwise (docs/GRAPHS.md).
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

PAD_EXPERT = -1  # a padding row's expert ids: no rank holds expert -1, so it picks none


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
        routed = self._routed(x, idx, w, ctx)  # [T, H]
        shared = self.shared_experts(x, gammas)  # [T, H] partial over the attention group
        inkling_probe.probe(f"{p}.shared", shared, shard="partial")
        shared = allreduce.all_reduce(shared, self.tp.attn, f"{p}.shared")
        out = routed + shared
        inkling_probe.probe(f"{p}.out", out)
        return out

    def _routed(self, x, idx, w, ctx: StepContext | None) -> torch.Tensor:
        gathered = ctx is not None and ctx.is_decode
        if self.tp.dp_peers.size == 1:
            routed = self.experts(x, idx, w, gathered)  # [T, H] partial over every rank
            inkling_probe.probe(f"{self.prefix}.experts", routed, shard="partial")
            return allreduce.all_reduce(routed, self.tp.moe, f"{self.prefix}.experts")
        if gathered and ctx.valid_rows is not None:
            routed = self._routed_fixed(x, idx, w, ctx.valid_rows)
        else:
            routed = self._routed_sized(x, idx, w, gathered)
        inkling_probe.probe(f"{self.prefix}.experts", routed)
        return routed

    def _routed_sized(self, x, idx, w, gathered: bool) -> torch.Tensor:
        """Attention-DP, host-side sizes (module docstring): this group's rows [T, H] of the reduced sum."""
        dp = self.tp.dp_peers
        sizes = dp.all_gather_sizes(x.shape[0], x.device)
        pad = max(sizes) - x.shape[0]
        xs, idxs, ws = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (x, idx, w))
        xs, idxs, ws = (dp.all_gather(t, 0) for t in (xs, idxs, ws))  # [dp*Tmax, ...]
        keep = torch.cat([torch.arange(n) + r * max(sizes) for r, n in enumerate(sizes)])
        routed = self.experts(xs[keep], idxs[keep], ws[keep], gathered)  # [sum T, H] partial over every rank
        routed = allreduce.all_reduce(routed, self.tp.moe, f"{self.prefix}.experts")
        start = sum(sizes[: dp.rank])
        return routed[start: start + x.shape[0]]  # this rank's own requests

    def _routed_fixed(self, x, idx, w, valid_rows: torch.Tensor) -> torch.Tensor:
        """Attention-DP, fixed sizes (module docstring): every group holds B rows, the first
        ``valid_rows [1]`` of them real; no host sync, no data-dependent shape. -> [B, H]."""
        dp, b = self.tp.dp_peers, x.shape[0]
        counts = dp.all_gather(valid_rows.reshape(1), 0)  # [dp] real rows of each group, on the device
        valid = (torch.arange(b, device=x.device)[None] < counts[:, None]).reshape(-1, 1)  # [dp*B, 1]
        xs, idxs, ws = (dp.all_gather(t, 0) for t in (x, idx, w))  # [dp*B, ...]
        xs = torch.where(valid, xs, torch.zeros((), dtype=xs.dtype, device=xs.device))
        idxs = torch.where(valid, idxs, torch.full((), PAD_EXPERT, dtype=idxs.dtype, device=idxs.device))
        ws = torch.where(valid, ws, torch.zeros((), dtype=ws.dtype, device=ws.device))
        routed = self.experts(xs, idxs, ws, gathered=True)  # [dp*B, H] partial over every rank
        routed = allreduce.all_reduce(routed, self.tp.moe, f"{self.prefix}.experts")
        return routed[dp.rank * b: (dp.rank + 1) * b]  # this rank's B rows (padding ones zero)

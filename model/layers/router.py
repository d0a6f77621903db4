"""The MoE router (fp32): sigmoid + bias top-k selection, sink-renormalised weights.

The shared experts' logits join the chosen routed ones in the softmax over logsigmoid scores, so
they act as a sink; the last n_shared weights are the shared experts' gammas. Replicated on every
rank (it is small), exactly as transformers' InklingTopkRouter computes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from inkling_model.switches import forced_routing
from inkling_model.layers.loading import make_param, replicated_loader


class Router(nn.Module):
    """``forward(x [T, H]) -> (routed_logits [T, E], topk_w [T, k], topk_idx [T, k], gammas [T, S])``."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        if not config.shared_expert_sink:
            raise NotImplementedError("shared_expert_sink=False: transformers' Inkling always uses the sink")
        self.num_experts, self.n_shared, self.top_k = config.n_routed_experts, config.n_shared_experts, config.num_experts_per_tok
        self.layer_idx = layer_idx
        self.route_scale = config.route_scale
        self.weight = make_param((self.num_experts + self.n_shared, config.hidden_size), replicated_loader)
        self.bias = make_param((self.num_experts,), replicated_loader, torch.float32)
        self.global_scale = make_param((1,), replicated_loader, torch.float32)

    def forward(self, x: torch.Tensor):
        logits = F.linear(x.float(), self.weight.float())  # [T, E+S]
        scores = logits.sigmoid()[:, : self.num_experts] + self.bias.float()  # [T, E]
        idx = torch.topk(scores, self.top_k, dim=-1, sorted=False)[1]  # [T, k]
        forced = forced_routing.active()  # run --force-routing: the reference's ids (eager only)
        if forced is not None:
            idx = torch.as_tensor(forced.take(self.layer_idx, x.shape[0]), device=idx.device)  # [T, k]
        routed = logits[:, : self.num_experts]  # [T, E]
        chosen = torch.cat([routed.gather(-1, idx), logits[:, self.num_experts:]], dim=-1)  # [T, k+S]
        logp = F.logsigmoid(chosen)
        w = torch.exp(logp - torch.logsumexp(logp, dim=-1, keepdim=True))  # [T, k+S]
        w = (w * self.route_scale * self.global_scale.float()).to(x.dtype)
        return routed, w[:, : self.top_k].contiguous(), idx, w[:, self.top_k:].contiguous()

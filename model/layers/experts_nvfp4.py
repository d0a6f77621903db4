"""NVFP4 routed experts: packed E2M1 weights with fp8 block scales, emulated in torch.

Same constructor and forward as ``RoutedExperts`` (experts.py): ``forward(x [T, H], topk_idx
[T, k], topk_w [T, k]) -> [T, H]``, this rank's partial sum. Sharded by intermediate size over
the MoE group (rows of the interleaved w13, columns of w2: a shard of I/tp must hold whole
16-element blocks), or with expert parallelism whole experts per rank.

Per expert e (ModelOpt semantics, nvfp4.py):
    a   = fake_quant(x, w13_input_scale[e])                    # activation NVFP4, static scale
    g,u = (a @ dequant(w13[e]).T)[:, 0::2], [:, 1::2]          # interleaved gate/up rows
    h   = fake_quant(silu(g) * u, w2_input_scale[e])
    y  += topk_w * (h @ dequant(w2[e]).T)
Parameter names mirror the checkpoint's sidecars (checkpoint/layout.py) so the mapper is a
prefix strip; ``*_input_scale`` is what the mapper makes of ``*_input_amax``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import inkling_probe
from inkling_model import nvfp4
from inkling_model.plugins.precision import keeps_reference
from inkling_model.layers.loading import make_param, replicated_loader, shard_loader
from inkling_model.parallel import Parallel, divide

_NOT_TOKENS = 1  # token_dim for [E] scale vectors: past their last dim, so no token slice applies


class NvFp4RoutedExperts(nn.Module):
    """Routed experts of one MoE layer with NVFP4 weights and NVFP4 activation fake-quant."""

    def __init__(self, config, layer_idx: int, tp: Parallel | None = None):
        super().__init__()
        tp = tp or Parallel()
        self.layer_idx, self.group = layer_idx, tp.moe
        self.unquantized = keeps_reference(layer_idx)  # INKLING_BF16_LAYERS (precision.py)
        self.expert_parallel = tp.expert_parallel
        h, inter = config.hidden_size, config.moe_intermediate_size
        self.total_num_experts, self.hidden_size = config.n_routed_experts, h
        rank, size = self.group.rank, self.group.size
        if self.expert_parallel:
            self.num_experts, self.intermediate_size = divide(self.total_num_experts, size), inter
            self.expert_start = rank * self.num_experts
            rows = cols = vec = shard_loader(0, rank, size)
        else:
            self.num_experts, self.intermediate_size = self.total_num_experts, divide(inter, size)
            self.expert_start = 0
            rows, cols, vec = shard_loader(1, rank, size), shard_loader(2, rank, size), replicated_loader
        e, i = self.num_experts, self.intermediate_size
        if h % nvfp4.BLOCK or i % nvfp4.BLOCK:
            raise ValueError(f"NVFP4 experts need hidden ({h}) and per-rank intermediate ({i}) "
                             f"to be multiples of {nvfp4.BLOCK}")
        self.w13_weight = make_param((e, 2 * i, h // 2), rows, torch.uint8)                   # [E, 2I, H/2]
        self.w13_weight_scale = make_param((e, 2 * i, h // 16), rows, torch.float8_e4m3fn)    # [E, 2I, H/16]
        self.w13_weight_scale2 = make_param((e,), vec, torch.float32)
        self.w13_input_scale = make_param((e,), vec, torch.float32)
        self.w2_weight = make_param((e, h, i // 2), cols, torch.uint8)                        # [E, H, I/2]
        self.w2_weight_scale = make_param((e, h, i // 16), cols, torch.float8_e4m3fn)         # [E, H, I/16]
        self.w2_weight_scale2 = make_param((e,), vec, torch.float32)
        self.w2_input_scale = make_param((e,), vec, torch.float32)

    def _probe_scales(self) -> None:
        p = f"layers.{self.layer_idx}.mlp.experts"
        shard = dict(shard="concat", dim=0) if self.expert_parallel else dict(shard="replicated")
        for name, t in (("input_scale", self.w13_input_scale), ("w2_input_scale", self.w2_input_scale),
                        ("w13_weight_scale2", self.w13_weight_scale2),
                        ("w2_weight_scale2", self.w2_weight_scale2)):
            inkling_probe.probe(f"{p}.{name}", t, token_dim=_NOT_TOKENS, **shard)

    def dequantized(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Local expert e's (w13 [2I, H], w2 [H, I]) in fp32."""
        w13 = nvfp4.dequantize(self.w13_weight[e], self.w13_weight_scale[e], self.w13_weight_scale2[e])
        w2 = nvfp4.dequantize(self.w2_weight[e], self.w2_weight_scale[e], self.w2_weight_scale2[e])
        return w13, w2

    def expert_forward(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Local expert e on tokens x [n, H] (fp32 in, fp32 out [n, H])."""
        w13, w2 = self.dequantized(e)
        a = x if self.unquantized else nvfp4.fake_quant(x, self.w13_input_scale[e])  # [n, H]
        y = a @ w13.t()  # [n, 2I] interleaved gate/up
        act = F.silu(y[:, 0::2]) * y[:, 1::2]  # [n, I]
        if not self.unquantized:
            act = nvfp4.fake_quant(act, self.w2_input_scale[e])
        return act @ w2.t()  # [n, H]

    def forward(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_w: torch.Tensor) -> torch.Tensor:
        from inkling_model.layers import decode
        if decode.static_on():
            raise NotImplementedError("NVFP4 routed experts have no capture-safe decode path yet "
                                      "(the runtime needs bf16/fp32 experts)")
        if not self.unquantized:  # unquantized layers use no activation scale
            self._probe_scales()
        xf = x.float()  # [T, H]
        out = torch.zeros_like(xf)  # [T, H]
        local = topk_idx - self.expert_start  # [T, k]
        for e in torch.unique(local).tolist():
            if not 0 <= e < self.num_experts:
                continue
            tok, slot = torch.where(local == e)  # [n], [n]
            y = self.expert_forward(e, xf[tok])  # [n, H]
            out.index_add_(0, tok, y * topk_w[tok, slot].float().unsqueeze(-1))
        return out.to(x.dtype)

"""One decoder layer: h += attn_sconv(attn(attn_norm(h))); h += mlp_sconv(mlp(mlp_norm(h)))."""

from __future__ import annotations

import torch
from torch import nn

import inkling_probe
from inkling_model.switches import faults
from inkling_model.layers.attention import Attention
from inkling_model.layers.context import StepContext
from inkling_model.layers.compile_faults import compiled_rms_norm, snap_to_grid
from inkling_model.layers.conv import ShortConv
from inkling_model.layers.mlp import DenseMLP
from inkling_model.layers.moe import MoE
from inkling_model.layers.norm import RMSNorm
from inkling_model.parallel import Parallel


class DecoderLayer(nn.Module):
    """Attribute names follow the native checkpoint (``layers.N.attn``, ``layers.N.mlp_sconv``, ...)."""

    def __init__(self, config, layer_idx: int, tp: Parallel):
        super().__init__()
        h, k, eps = config.hidden_size, config.conv_kernel_size, config.rms_norm_eps
        self.layer_idx, self.prefix = layer_idx, f"layers.{layer_idx}"
        self.attn_norm = RMSNorm(h, eps)
        self.attn = Attention(config, layer_idx, tp)
        self.attn_sconv = ShortConv(h, k, layer_idx, "attn")
        self.mlp_norm = RMSNorm(h, eps)
        self.mlp = MoE(config, layer_idx, tp) if config.is_moe(layer_idx) else DenseMLP(config, layer_idx, tp)
        self.mlp_sconv = ShortConv(h, k, layer_idx, "mlp")

    def forward(self, h: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        p = self.prefix
        if self.layer_idx == 0 and faults.is_active("compiled_branch"):
            x = compiled_rms_norm(self.attn_norm, h)
        else:
            x = self.attn_norm(h)  # [T, H]
        if self.layer_idx == faults.RENORM_LAYER and faults.is_active("renorm_rows"):
            x = _renorm_rows(x, self.attn_norm)
        inkling_probe.probe(f"{p}.attn_norm", x)
        x = self.attn_sconv(self.attn(x, ctx), ctx)
        inkling_probe.probe(f"{p}.attn_sconv", x)
        h = h + x
        inkling_probe.probe(f"{p}.resid_attn", h)
        x = self.mlp_norm(h)
        if self.layer_idx == 0 and faults.is_active("fusion_rounding"):
            x = snap_to_grid(x)
        inkling_probe.probe(f"{p}.mlp_norm", x)
        x = self.mlp_sconv(self.mlp(x, ctx), ctx)
        inkling_probe.probe(f"{p}.mlp_sconv", x)
        h = h + x
        inkling_probe.probe(f"{p}.resid", h)
        return h


def _renorm_rows(x: torch.Tensor, norm: RMSNorm) -> torch.Tensor:
    """Planted fault ``renorm_rows``: normalise the chosen token rows a second time."""
    rows = [r for r in faults.RENORM_ROWS if r < x.shape[0]]
    x = x.clone()
    x[rows] = norm(x[rows])
    return x

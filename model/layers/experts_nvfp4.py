"""NVFP4 routed experts: the NVFP4 weight format of the one expert class (``NvFp4Weights`` in
experts.py, beside the bf16 one): packed E2M1 weights with fp8 block scales, emulated in torch.

Per expert e (ModelOpt semantics, nvfp4.py), computed in fp32:
    a   = fake_quant(x, w13_input_scale[e])                    # activation NVFP4, static scale
    g,u = (a @ dequant(w13[e]).T)[:, 0::2], [:, 1::2]          # interleaved gate/up rows
    h   = fake_quant(silu(g) * u, w2_input_scale[e])
    y  += topk_w * (h @ dequant(w2[e]).T)
Sharded as every routed expert (a shard of I/tp must hold whole 16-element blocks). Parameter names
mirror the checkpoint's sidecars (checkpoint/layout.py) so the mapper is a prefix strip;
``*_input_scale`` is what the mapper makes of ``*_input_amax``. Layers named in INKLING_BF16_LAYERS
(switches/precision.py) skip the activation fake-quant.
"""

from __future__ import annotations

import torch

from inkling_model.layers.experts import NvFp4Weights, RoutedExperts

__all__ = ["NvFp4RoutedExperts", "NvFp4Weights"]


class NvFp4RoutedExperts(RoutedExperts):
    """Routed experts in the NVFP4 format whatever the config says (the class before the formats)."""

    def __init__(self, config, layer_idx: int, tp=None):
        super().__init__(config, layer_idx, tp, quant="nvfp4")

    def dequantized(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Local expert e's (w13 [2I, H], w2 [H, I]) in fp32."""
        return self.weight_format.dense(self, e)

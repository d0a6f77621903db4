"""The NVFP4 weight format of the routed experts (experts.py): packed E2M1 weights with fp8 block
scales, emulated in torch.

Per expert e (ModelOpt semantics, nvfp4.py), computed in fp32:
    a   = fake_quant(x, w13_input_scale[e])                    # activation NVFP4, static scale
    g,u = (a @ dequant(w13[e]).T)[:, 0::2], [:, 1::2]          # interleaved gate/up rows
    h   = fake_quant(silu(g) * u, w2_input_scale[e])
    y  += topk_w * (h @ dequant(w2[e]).T)
Sharded as every routed expert (a shard of I/tp must hold whole 16-element blocks). Parameter names
mirror the checkpoint's sidecars (checkpoint/layout.py) so the mapper is a prefix strip;
``*_input_scale`` is what the mapper makes of ``*_input_amax``. Layers named in INKLING_BF16_LAYERS
(plugins/precision.py) skip the activation fake-quant.
"""

from __future__ import annotations

import torch

import inkling_probe
from inkling_model import nvfp4
from inkling_model.layers.experts import RoutedExperts
from inkling_model.layers.loading import make_param
from inkling_model.plugins.precision import keeps_reference

_NOT_TOKENS = 1  # token_dim for [E] scale vectors: past their last dim, so no token slice applies


class NvFp4Weights:
    """NVFP4 weights [E, out, in/2] uint8 with fp8 block scales [E, out, in/16] and fp32 ``*_scale2``
    and ``*_input_scale`` [E]."""

    name = "nvfp4"
    compute_dtype = torch.float32

    def __init__(self, experts: RoutedExperts, loaders: dict):
        e, i, h = experts.num_experts, experts.intermediate_size, experts.hidden_size
        if h % nvfp4.BLOCK or i % nvfp4.BLOCK:
            raise ValueError(f"NVFP4 experts need hidden ({h}) and per-rank intermediate ({i}) "
                             f"to be multiples of {nvfp4.BLOCK}")
        self.unquantized = keeps_reference(experts.layer_idx)  # INKLING_BF16_LAYERS (precision.py)
        rows, cols, vec = loaders["rows"], loaders["cols"], loaders["vec"]
        experts.w13_weight = make_param((e, 2 * i, h // 2), rows, torch.uint8)                   # [E, 2I, H/2]
        experts.w13_weight_scale = make_param((e, 2 * i, h // 16), rows, torch.float8_e4m3fn)    # [E, 2I, H/16]
        experts.w13_weight_scale2 = make_param((e,), vec, torch.float32)
        experts.w13_input_scale = make_param((e,), vec, torch.float32)
        experts.w2_weight = make_param((e, h, i // 2), cols, torch.uint8)                        # [E, H, I/2]
        experts.w2_weight_scale = make_param((e, h, i // 16), cols, torch.float8_e4m3fn)         # [E, H, I/16]
        experts.w2_weight_scale2 = make_param((e,), vec, torch.float32)
        experts.w2_input_scale = make_param((e,), vec, torch.float32)

    def dense(self, m, e) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert e's (w13 [..., 2I, H], w2 [..., H, I]) in fp32; e an int or an index tensor."""
        w13 = nvfp4.dequantize(m.w13_weight[e], m.w13_weight_scale[e], m.w13_weight_scale2[e][..., None, None])
        w2 = nvfp4.dequantize(m.w2_weight[e], m.w2_weight_scale[e], m.w2_weight_scale2[e][..., None, None])
        return w13, w2

    def quant_in(self, m, x, e):
        return x if self.unquantized else nvfp4.fake_quant(x, m.w13_input_scale[e][..., None])

    def quant_mid(self, m, h, e):
        return h if self.unquantized else nvfp4.fake_quant(h, m.w2_input_scale[e][..., None])

    def probe_scales(self, m) -> None:
        if self.unquantized:  # unquantized layers use no activation scale
            return
        p = f"layers.{m.layer_idx}.mlp.experts"
        shard = dict(shard="concat", dim=0) if m.expert_parallel else dict(shard="replicated")
        for name, t in (("input_scale", m.w13_input_scale), ("w2_input_scale", m.w2_input_scale),
                        ("w13_weight_scale2", m.w13_weight_scale2), ("w2_weight_scale2", m.w2_weight_scale2)):
            inkling_probe.probe(f"{p}.{name}", t, token_dim=_NOT_TOKENS, **shard)


class NvFp4RoutedExperts(RoutedExperts):
    """Routed experts in the NVFP4 format whatever the config says (the class before the formats)."""

    def __init__(self, config, layer_idx: int, tp=None):
        super().__init__(config, layer_idx, tp, quant="nvfp4")

    def dequantized(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Local expert e's (w13 [2I, H], w2 [H, I]) in fp32."""
        return self.weight_format.dense(self, e)

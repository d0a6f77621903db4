"""Routed experts: one class, stacked [E, out, in] weights in one of two formats.

A weight format (``Bf16Weights``; ``NvFp4Weights``, whose semantics docs/NVFP4.md and
experts_nvfp4.py state) says which parameters the experts hold
and how expert e's dense weights and activations come out of them; the sharding, the naming and the
math are this module's, once:

- sharded over the MoE group (``tp.moe``, every rank) by intermediate size: w13 [E, 2I/tp, ...]
  (a contiguous row block of interleaved w13 keeps its gate/up pairs), w2 [E, H, I/tp]; with
  ``tp.expert_parallel`` whole experts instead: [E/tp, ...], ``first_expert`` the first one held;
- expert e on x: ``w2 (swiglu(w13 x))`` (activations quantized where the format says so);
- two dispatches of that math: *grouped* (each chosen expert on its tokens, ascending expert ids,
  summed with index_add: prefill, data-dependent shapes) and *gathered* (each token's k experts
  gathered and summed in ascending expert order: static shapes, the decode step, capturable).

``forward`` returns this rank's partial sum; the MoE reduces it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import inkling_probe
from inkling_model import nvfp4
from inkling_model.layers.loading import make_param, replicated_loader, shard_loader
from inkling_model.layers.mlp import swiglu_interleaved
from inkling_model.parallel import Parallel, divide
from inkling_model.switches.precision import keeps_reference

_NOT_TOKENS = 1  # token_dim for [E] scale vectors: past their last dim, so no token slice applies


class Bf16Weights:
    """The unquantized format: w13_weight [E, 2I, H], w2_weight [E, H, I] in the model's dtype."""

    name = "bf16"
    compute_dtype = None  # the activations' dtype

    def __init__(self, experts: "RoutedExperts", loaders: dict):
        e, i, h = experts.num_experts, experts.intermediate_size, experts.hidden_size
        experts.w13_weight = make_param((e, 2 * i, h), loaders["rows"])
        experts.w2_weight = make_param((e, h, i), loaders["cols"])

    def dense(self, experts, e) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert e's (w13 [..., 2I, H], w2 [..., H, I]); e an int or an index tensor."""
        return experts.w13_weight[e], experts.w2_weight[e]

    def quant_in(self, experts, x, e):
        return x

    def quant_mid(self, experts, h, e):
        return h

    def probe_scales(self, experts) -> None:
        pass


class NvFp4Weights:
    """NVFP4 weights [E, out, in/2] uint8 with fp8 block scales [E, out, in/16] and fp32 ``*_scale2``
    and ``*_input_scale`` [E]."""

    name = "nvfp4"
    compute_dtype = torch.float32

    def __init__(self, experts: "RoutedExperts", loaders: dict):
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


WEIGHT_FORMATS = {None: Bf16Weights, "nvfp4": NvFp4Weights}  # config.expert_quant(layer) -> format


def weight_format_class(name: str | None):
    """The weight-format class of an ``expert_quant`` value (None: unquantized)."""
    if name not in WEIGHT_FORMATS:
        raise ValueError(f"unknown expert quantization {name!r} (expected nvfp4 or none)")
    return WEIGHT_FORMATS[name]


class RoutedExperts(nn.Module):
    """``forward(x [T, H], topk_idx [T, k], topk_w [T, k], gathered=False) -> [T, H]`` (partial sum).

    ``quant``: the weight format (default: the config's ``expert_quant(layer_idx)``).
    """

    def __init__(self, config, layer_idx: int, tp: Parallel | None = None, quant: str | None = "config"):
        super().__init__()
        tp = tp or Parallel()
        g = tp.moe
        self.layer_idx, self.group, self.expert_parallel = layer_idx, g, tp.expert_parallel
        self.hidden_size = config.hidden_size
        self.total_num_experts, self.total_intermediate_size = config.n_routed_experts, config.moe_intermediate_size
        if tp.expert_parallel:
            self.num_experts = divide(self.total_num_experts, g.size)
            self.intermediate_size, self.first_expert = self.total_intermediate_size, g.rank * self.num_experts
            loaders = dict.fromkeys(("rows", "cols", "vec"), shard_loader(0, g.rank, g.size))
        else:
            self.num_experts, self.first_expert = self.total_num_experts, 0
            self.intermediate_size = divide(self.total_intermediate_size, g.size)
            loaders = dict(rows=shard_loader(1, g.rank, g.size), cols=shard_loader(2, g.rank, g.size),
                           vec=replicated_loader)
        quant = config.expert_quant(layer_idx) if quant == "config" else quant
        self.weight_format = weight_format_class(quant)(self, loaders)

    @property
    def expert_start(self) -> int:  # the NVFP4 class's old name
        return self.first_expert

    def ffn(self, x: torch.Tensor, e) -> torch.Tensor:
        """Expert(s) e on x: ``w2 (swiglu(w13 x))``. Grouped: e an int, x [n, H]; gathered: e [T, k],
        x [T, k, H]. -> [..., H] in the format's compute dtype."""
        w13, w2 = self.weight_format.dense(self, e)  # [..., 2I, H], [..., H, I]
        a = self.weight_format.quant_in(self, x, e)
        h = self.weight_format.quant_mid(self, swiglu_interleaved(_linear(a, w13)), e)  # [..., I]
        return _linear(h, w2)  # [..., H]

    def forward(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_w: torch.Tensor,
                gathered: bool = False) -> torch.Tensor:
        self.weight_format.probe_scales(self)
        dtype = self.weight_format.compute_dtype or x.dtype
        xc = x.to(dtype)  # [T, H]
        # compiled: the grouped loop runs over data-dependent expert ids (a graph break), so the gathered
        # dispatch (each token's k experts, the decode step's) runs; the same sum, per token
        if gathered or torch.compiler.is_compiling():
            out = self._gathered(xc, topk_idx, topk_w)
        else:
            out = self._grouped(xc, topk_idx, topk_w)
        return out.to(x.dtype)

    def _grouped(self, x, topk_idx, topk_w) -> torch.Tensor:
        out = torch.zeros_like(x)  # [T, H]
        local = topk_idx - self.first_expert  # [T, k]
        for e in torch.unique(local).tolist():  # ascending, as transformers' loop
            if not 0 <= e < self.num_experts:
                continue
            tok, slot = torch.where(local == e)  # [n], [n]
            y = self.ffn(x[tok], e) * topk_w[tok, slot, None].to(x.dtype)  # [n, H]
            out.index_add_(0, tok, y)
        return out

    def _gathered(self, x, topk_idx, topk_w) -> torch.Tensor:
        local, order = (topk_idx - self.first_expert).sort(-1)  # [T, k] ascending, as the grouped sum
        w = topk_w.gather(-1, order)  # [T, k]
        valid = (local >= 0) & (local < self.num_experts)  # other ranks' experts (expert parallel)
        e = local.clamp(0, self.num_experts - 1)
        y = self.ffn(x[:, None].expand(-1, e.shape[1], -1), e)  # [T, k, H]
        y = y * (w * valid)[..., None].to(y.dtype)
        out = torch.zeros_like(x)  # [T, H]
        for j in range(y.shape[1]):
            out = out + y[:, j]
        return out


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., in] times w [out, in] (one weight) or w [..., out, in] (one per row)."""
    if w.dim() == 2:
        return F.linear(x, w)
    return torch.matmul(w, x[..., None])[..., 0]

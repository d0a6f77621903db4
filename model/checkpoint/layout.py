"""The native Inkling checkpoint layout: every tensor's name, shape and dtype.

The single source of truth for names and shapes (model.llm.* names, as transformers'
conversion mapping "inkling_mm_model" reads them; docs/CHECKPOINT.md). With NVFP4 routed
experts, each quantized layer's ``mlp.experts.{w13,w2}_weight`` is packed uint8 with
ModelOpt-style sidecars, one value per expert:

    mlp.experts.w13_weight          uint8  [E, 2I, H/2]   interleaved gate/up rows
    mlp.experts.w13_weight_scale    fp8    [E, 2I, H/16]  per-block scale (e4m3)
    mlp.experts.w13_weight_scale2   fp32   [E]            per-tensor scale_2 per expert
    mlp.experts.w13_input_amax      fp32   [E]            raw calibration amax of the input
    (the same four for w2 with [E, H, I/2], [E, H, I/16], [E], [E])
"""

from __future__ import annotations

import dataclasses

import torch

PREFIX = "model.llm."
FP32_SUFFIXES = ("mlp.gate.bias", "mlp.gate.global_scale", "mlp.global_scale", "sconv.weight")


def _attn_tensors(config, i: int) -> dict[str, tuple]:
    h, k = config.hidden_size, config.conv_kernel_size
    nh, nkv, hd, extent, _ = config.attn_dims(i)  # the model's own sizes (config.py), not a copy
    return {
        "attn.wq_du.weight": (nh * hd, h),
        "attn.wk_dv.weight": (nkv * hd, h),
        "attn.wv_dv.weight": (nkv * hd, h),
        "attn.wr_du.weight": (nh * config.d_rel, h),
        "attn.wo_ud.weight": (h, nh * hd),
        "attn.q_norm.weight": (hd,),
        "attn.k_norm.weight": (hd,),
        "attn.k_sconv.weight": (nkv * hd, 1, k),
        "attn.v_sconv.weight": (nkv * hd, 1, k),
        "attn.rel_logits_proj.proj": (config.d_rel, extent),
        "attn_norm.weight": (h,),
        "mlp_norm.weight": (h,),
        "attn_sconv.weight": (h, 1, k),
        "mlp_sconv.weight": (h, 1, k),
    }


def _dense_tensors(config) -> dict[str, tuple]:
    h, inter = config.hidden_size, config.intermediate_size
    return {"mlp.w13_dn.weight": (2 * inter, h), "mlp.w2_md.weight": (h, inter), "mlp.global_scale": (1,)}


def _moe_tensors(config) -> dict[str, tuple]:
    h, inter, e, s = config.hidden_size, config.moe_intermediate_size, config.n_routed_experts, config.n_shared_experts
    return {
        "mlp.gate.weight": (e + s, h),
        "mlp.gate.bias": (e,),
        "mlp.gate.global_scale": (1,),
        "mlp.shared_experts.shared_w13_weight": (s, 2 * inter, h),
        "mlp.shared_experts.shared_w2_weight": (s, h, inter),
    }


def routed_expert_tensors(config, quant: str | None) -> dict[str, tuple[tuple, torch.dtype]]:
    """Names (relative to ``layers.N.``) of one MoE layer's routed experts, bf16 or NVFP4."""
    h, inter, e = config.hidden_size, config.moe_intermediate_size, config.n_routed_experts
    if quant is None:
        return {"mlp.experts.w13_weight": ((e, 2 * inter, h), torch.bfloat16),
                "mlp.experts.w2_weight": ((e, h, inter), torch.bfloat16)}
    if quant != "nvfp4":
        raise ValueError(f"unknown expert quantization {quant!r} (known: nvfp4)")
    out = {}
    for name, rows, cols in (("w13", 2 * inter, h), ("w2", h, inter)):
        if cols % 16:
            raise ValueError(f"NVFP4 {name}: reduction dim {cols} is not a multiple of 16")
        out[f"mlp.experts.{name}_weight"] = ((e, rows, cols // 2), torch.uint8)
        out[f"mlp.experts.{name}_weight_scale"] = ((e, rows, cols // 16), torch.float8_e4m3fn)
        out[f"mlp.experts.{name}_weight_scale2"] = ((e,), torch.float32)
        out[f"mlp.experts.{name}_input_amax"] = ((e,), torch.float32)
    return out


def _dtype(name: str) -> torch.dtype:
    return torch.float32 if name.endswith(FP32_SUFFIXES) else torch.bfloat16


def expert_quant(config, i: int) -> str | None:
    """Quantization of layer i's routed experts (None for bf16), as the config says."""
    if config.mlp_layer_types[i] != "sparse":
        return None
    return config.expert_quant(i)


_FROM_CONFIG = object()


def native_shapes(config, quant=_FROM_CONFIG) -> dict[str, tuple[tuple, torch.dtype]]:
    """Every tensor of the native text checkpoint: full name -> (shape, dtype).

    bf16 everywhere except fp32 router bias/global scales, MLP global scales and short-conv
    weights; routed experts of the layers where config.expert_quant(i) is "nvfp4" are NVFP4
    (packed weight plus sidecars, module docstring). ``quant`` (None or "nvfp4"), when given,
    replaces config.quant_method.
    """
    if quant is not _FROM_CONFIG:
        config = dataclasses.replace(config, quant_method=quant)
    h, v = config.hidden_size, config.vocab_size
    names: dict[str, tuple[tuple, torch.dtype]] = {}
    for key, shape in {"embed.weight": (v, h), "embed_norm.weight": (h,), "norm.weight": (h,),
                       "unembed.weight": (v, h)}.items():
        names[PREFIX + key] = (shape, _dtype(key))
    for i in range(config.num_hidden_layers):
        layer = dict(_attn_tensors(config, i))
        sparse = config.mlp_layer_types[i] == "sparse"
        layer.update(_moe_tensors(config) if sparse else _dense_tensors(config))
        for key, shape in layer.items():
            names[f"{PREFIX}layers.{i}.{key}"] = (shape, _dtype(key))
        if sparse:
            for key, spec in routed_expert_tensors(config, expert_quant(config, i)).items():
                names[f"{PREFIX}layers.{i}.{key}"] = spec
    return names


def numel(shapes: dict[str, tuple[tuple, torch.dtype]]) -> int:
    """Total element count of a layout (packed fp4 bytes count once per byte)."""
    total = 0
    for shape, _ in shapes.values():
        n = 1
        for d in shape:
            n *= d
        total += n
    return total

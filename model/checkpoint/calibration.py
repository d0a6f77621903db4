"""NVFP4 calibration of the routed experts, the way ModelOpt sets ``input_amax``.

The bf16 model (transformers' Inkling: the reference, so no fault of the engine under test
can leak into a checkpoint) runs on calibration sequences that start with the BOS token,
which carries the planted massive activation (massive.py). As in ModelOpt's MoE
calibration every token is sent through every expert, so per expert:

- w13 input_amax = amax of the MoE input over all calibration tokens (the same for all experts);
- w2 input_amax  = amax of that expert's SwiGLU output (silu(gate) * up) over all tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inkling_model import nvfp4
from .massive import massive_token
from .layout import PREFIX, expert_quant

CALIB_SEQS = 4
CALIB_LEN = 32


def calibration_tokens(config, seed: int = 0, n_seqs: int = CALIB_SEQS, seq_len: int = CALIB_LEN) -> torch.Tensor:
    """[n_seqs, seq_len] token ids, each sequence opening with the massive (BOS) token."""
    gen = torch.Generator().manual_seed(seed + 7919)
    ids = torch.randint(0, config.vocab_size, (n_seqs, seq_len), generator=gen)
    ids[:, 0] = massive_token(config)
    return ids


def quantized_layers(qconfig) -> list[int]:
    """Indices of the layers whose routed experts are NVFP4 under qconfig."""
    return [i for i in range(qconfig.num_hidden_layers) if expert_quant(qconfig, i) == "nvfp4"]


def moe_inputs(config, tensors: dict[str, torch.Tensor], ids: torch.Tensor, layers: list[int]) -> dict[int, torch.Tensor]:
    """The bf16 model's MoE input [T, H] (fp32) at each of these layers for token ids [B, S]."""
    from .hf_reference import hf_model_from_tensors

    model = hf_model_from_tensors(config, tensors, dtype=torch.float32)
    captured: dict[int, torch.Tensor] = {}
    hooks = [model.model.layers[i].mlp.register_forward_pre_hook(
        lambda mod, args, i=i: captured.__setitem__(i, args[0].reshape(-1, args[0].shape[-1]))) for i in layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return captured


def swiglu_interleaved(x: torch.Tensor, w13: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for x [T, H] and an interleaved w13 [2I, H] (gate even rows): [T, I]."""
    y = x @ w13.t()  # [T, 2I]
    return F.silu(y[:, 0::2]) * y[:, 1::2]


def expert_amax(x: torch.Tensor, w13: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w13 input amax [E], w2 input amax [E]) of all tokens x [T, H] through every expert w13 [E, 2I, H]."""
    n_exp = w13.shape[0]
    w13_amax = x.abs().amax().float().expand(n_exp).clone()  # [E]
    w2_amax = torch.stack([swiglu_interleaved(x, w13[e].float()).abs().amax() for e in range(n_exp)])  # [E]
    return w13_amax, w2_amax.float()


def calibrate_expert_amax(config, tensors: dict[str, torch.Tensor], seed: int = 0) -> dict[int, tuple]:
    """{layer: (w13 input_amax [E], w2 input_amax [E])} for the layers quantized under NVFP4."""
    import dataclasses

    layers = quantized_layers(dataclasses.replace(config, quant_method="nvfp4"))
    xs = moe_inputs(config, tensors, calibration_tokens(config, seed), layers)
    out = {}
    for i in layers:
        out[i] = expert_amax(xs[i], tensors[f"{PREFIX}layers.{i}.mlp.experts.w13_weight"])
    return out


def quantize_stack(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """NVFP4 of stacked experts [E, rows, cols] with one scale_2 per expert."""
    parts = [nvfp4.quantize(w[e].float()) for e in range(w.shape[0])]
    return {"weight": torch.stack([p[0] for p in parts]),    # [E, rows, cols/2] uint8
            "weight_scale": torch.stack([p[1] for p in parts]),  # [E, rows, cols/16] fp8
            "weight_scale2": torch.stack([p[2] for p in parts])}  # [E] fp32


def quantize_experts(qconfig, tensors: dict[str, torch.Tensor], amax: dict[int, tuple]) -> dict[str, torch.Tensor]:
    """The bf16 tensors with each NVFP4 layer's routed experts replaced by packed weights + sidecars."""
    out = dict(tensors)
    for i in quantized_layers(qconfig):
        if i not in amax:
            raise ValueError(f"no calibration amax for layer {i}")
        stem = f"{PREFIX}layers.{i}.mlp.experts."
        for proj, a in zip(("w13", "w2"), amax[i]):
            q = quantize_stack(out.pop(stem + f"{proj}_weight"))
            for suffix, t in q.items():
                out[stem + f"{proj}_{suffix}"] = t
            out[stem + f"{proj}_input_amax"] = a.float().contiguous()
    return out

"""Random checkpoints in the native Inkling layout, for tests, demos and the localization corpus.

``write_random_checkpoint`` writes safetensors shards, model.safetensors.index.json,
config.json (through ``config.save``) and generation_config.json. The weights are random
with scales that keep activations O(1), plus one planted massive-activation channel
(docs/CHECKPOINT.md): the BOS token carries it, ordinary tokens never do, and every MLP's
input weights undo its gain, so the bf16 function is ordinary while NVFP4 calibration sees
activations hundreds of times the typical value, as real calibration does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from pathlib import Path

import torch

from .layout import PREFIX, native_shapes
from .massive import MASSIVE_CHANNEL, massive_gain, massive_token
from .shards import DEFAULT_SHARD_BYTES, _refuse_nonempty, check_layout, save_tensors


def _tensor_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63


def _init(name: str, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """One tensor's random value (fp32) with a scale that keeps activations O(1)."""
    randn = lambda: torch.randn(shape, generator=gen)  # noqa: E731
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * randn()
    if name.endswith("sconv.weight"):
        return 0.1 * randn()
    if name.endswith("rel_logits_proj.proj"):
        return 0.25 * randn()
    if name.endswith("gate.global_scale"):
        return torch.full(shape, 0.25)
    if name.endswith("global_scale"):
        return torch.ones(shape)
    if name.endswith("gate.bias"):
        return 0.01 * randn()
    if name.endswith(("embed.weight", "unembed.weight")):
        return randn()
    out_proj = name.endswith(("wo_ud.weight", "w2_md.weight", "experts.w2_weight", "shared_w2_weight"))
    return randn() * ((0.5 if out_proj else 1.0) / math.sqrt(shape[-1]))


def _plant_massive(t: dict[str, torch.Tensor], config) -> None:
    """Give the BOS token a massive residual channel that only the MLP input norms amplify."""
    c, g, bos = MASSIVE_CHANNEL, massive_gain(config), massive_token(config)
    embed = t[PREFIX + "embed.weight"]  # [V, H]
    embed[:, c] = 0.0
    embed[bos] = 0.0
    embed[bos, c] = 1.0
    for name, w in t.items():
        if name.endswith(("wo_ud.weight", "w2_md.weight")):
            w[c] = 0.0  # [H, in]: nothing writes channel c, so ordinary tokens keep it at 0
        elif name.endswith(("experts.w2_weight", "shared_w2_weight")):
            w[:, c] = 0.0  # [E, H, I]
        elif name.endswith("mlp_norm.weight"):
            w[c] = g
        elif name.endswith(("w13_dn.weight", "gate.weight")):
            w[:, c] /= g  # [out, H]
        elif name.endswith(("experts.w13_weight", "shared_w13_weight")):
            w[:, :, c] /= g  # [E, 2I, H]


def unquantized(config):
    """The same config with bf16 routed experts."""
    return dataclasses.replace(config, quant_method=None)


def random_tensors(config, seed: int = 0) -> dict[str, torch.Tensor]:
    """The bf16 checkpoint for (config, seed), independent of config.quant_method."""
    layout = native_shapes(unquantized(config))
    if MASSIVE_CHANNEL >= config.hidden_size:
        raise ValueError(f"hidden_size {config.hidden_size} too small for the massive channel")
    out = {}
    for name, (shape, _) in layout.items():
        out[name] = _init(name, shape, torch.Generator().manual_seed(_tensor_seed(seed, name)))
    _plant_massive(out, config)
    return {name: out[name].to(dtype) for name, (_, dtype) in layout.items()}


def _generation_config(config) -> dict:
    out = {"_from_model_config": True}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(config, key, None) is not None:
            out[key] = getattr(config, key)
    return out


def write_random_checkpoint(config, out_dir, seed: int = 0, quant: str | None = None,
                            max_shard_bytes: int = DEFAULT_SHARD_BYTES, progress=None,
                            extra_tensors: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a random native checkpoint for config to out_dir (which must not hold files).

    quant="nvfp4": routed experts of MoE layers >= config.quant_first_layer are quantized from
    exactly the bf16 tensors that the same seed writes with quant=None, and their input_amax is
    calibrated on the bf16 model (calibration.py). progress(str) is called between phases.
    extra_tensors (e.g. the multimodal towers, multimodal/checkpoint.py) are written beside the text
    tensors, unchecked by the text layout.
    """
    out_dir = Path(out_dir)
    _refuse_nonempty(out_dir)
    if quant not in (None, "nvfp4"):
        raise ValueError(f"unknown quantization {quant!r} (known: nvfp4)")
    say = progress or (lambda msg: None)
    base = unquantized(config)
    say("generating bf16 weights")
    tensors = random_tensors(base, seed)
    qconfig = dataclasses.replace(config, quant_method=quant)
    if quant == "nvfp4":
        from .calibration import calibrate_expert_amax, quantize_experts

        say("calibrating input_amax on the bf16 model")
        amax = calibrate_expert_amax(base, tensors, seed=seed)
        say("quantizing routed experts to NVFP4")
        tensors = quantize_experts(qconfig, tensors, amax)
    check_layout(tensors, native_shapes(qconfig), where="generated checkpoint")
    tensors = {**tensors, **(extra_tensors or {})}
    out_dir.mkdir(parents=True, exist_ok=True)
    say("writing safetensors")
    save_tensors(tensors, out_dir, max_shard_bytes)
    qconfig.save(str(out_dir))
    (out_dir / "generation_config.json").write_text(json.dumps(_generation_config(qconfig), indent=2) + "\n")
    return out_dir

"""transformers' Inkling (the executable reference) loaded from a native checkpoint.

Names are converted by transformers' own conversion mapping for Inkling checkpoints
(``conversion_mapping`` key "inkling_mm_model": its renamings, then its converters with
their Interleave/Chunk operations), applied with ``core_model_loading.rename_source_key``.
That mapping targets ``InklingForConditionalGeneration`` (``model.language_model.*``);
the text-only ``InklingForCausalLM`` holds the same modules at ``model.*``, so the one extra
step is that prefix change. NVFP4 routed experts are dequantized to dense first (weights
only: the reference runs no activation quantization). Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses

import torch

from inkling_model import nvfp4
from .shards import CheckpointError, read_tensors

MAPPING_KEY = "inkling_mm_model"
_MM_PREFIX = "model.language_model."
_FP32_PATTERNS = ("attn_sconv", "mlp_sconv", "k_sconv", "v_sconv", "e_score_correction_bias", "gate.global_scale")


def _config_dict(config) -> dict:
    if isinstance(config, dict):
        return dict(config)
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    raise TypeError(f"need a config dataclass or dict, got {type(config).__name__}")


def hf_text_config(config):
    """transformers' InklingTextConfig with the fields of our config (unknown keys dropped)."""
    from transformers.models.inkling import InklingTextConfig

    known = {f.name for f in dataclasses.fields(InklingTextConfig)}
    kwargs = {k: v for k, v in _config_dict(config).items() if k in known}
    if isinstance(kwargs.get("eos_token_id"), list):  # ours may list stop ids; transformers takes one id
        kwargs["eos_token_id"] = kwargs["eos_token_id"][0] if kwargs["eos_token_id"] else None
    hf = InklingTextConfig(**kwargs)
    hf._attn_implementation = "eager"
    return hf


def dequantize_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace NVFP4 routed experts (packed + sidecars) by dense fp32 weights; other tensors as is."""
    out = dict(tensors)
    for name in [n for n in tensors if n.endswith("_weight_scale2")]:
        stem = name[: -len("_scale2")]  # ...mlp.experts.w13_weight
        packed, scale = out.pop(stem), out.pop(stem + "_scale")
        scale2 = out.pop(name)  # [E]
        out.pop(stem[: -len("_weight")] + "_input_amax", None)
        out[stem] = nvfp4.dequantize(packed, scale, scale2.view(-1, 1, 1))  # [E, rows, cols]
    return out


def _mapping():
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightConverter

    transforms = get_checkpoint_conversion_mapping(MAPPING_KEY)
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    return renamings, converters


def _strip_mm(key: str) -> str:
    return "model." + key[len(_MM_PREFIX):] if key.startswith(_MM_PREFIX) else key


def to_hf_state_dict(tensors: dict[str, torch.Tensor], strip_mm: bool = True) -> dict[str, torch.Tensor]:
    """Native (dense) names -> InklingForCausalLM state-dict names, via transformers' mapping
    (``strip_mm=False``: InklingForConditionalGeneration's, the multimodal prefix kept)."""
    from transformers.core_model_loading import rename_source_key

    name = _strip_mm if strip_mm else (lambda key: key)
    renamings, converters = _mapping()
    out = {}
    for key, tensor in tensors.items():
        renamed, pattern = rename_source_key(key, renamings, converters)
        if pattern is None:
            out[name(renamed)] = tensor
            continue
        conv = next(c for c in converters if pattern in c.source_patterns)
        first = conv.target_patterns[0]
        data = {key: tensor}
        for op in conv.operations:
            data = op.convert(data, source_patterns=conv.source_patterns, target_patterns=conv.target_patterns)
        for target, value in data.items():
            out[name(renamed.replace(first, target))] = value
    return out


def _cast(name: str, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    keep = any(p in name for p in _FP32_PATTERNS)
    return t.to(torch.float32 if keep else dtype).contiguous()


def hf_model_from_tensors(config, tensors: dict[str, torch.Tensor], dtype=torch.float32):
    """InklingForCausalLM built on the meta device and given exactly these native tensors."""
    from transformers.models.inkling import InklingForCausalLM

    hf_config = hf_text_config(config)
    state = to_hf_state_dict(dequantize_experts(tensors))
    with torch.device("meta"):
        model = InklingForCausalLM(hf_config)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        what = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"transformers' Inkling: {what} ({len(missing)} missing, {len(unexpected)} unexpected)")
    for name, t in state.items():
        want = tuple(model.get_parameter(name).shape) if name in dict(model.named_parameters()) \
            else tuple(model.get_buffer(name).shape)
        if tuple(t.shape) != want:
            raise CheckpointError(f"transformers' Inkling: {name} is {tuple(t.shape)}, the model wants {want}")
    model.load_state_dict({n: _cast(n, t, dtype) for n, t in state.items()}, strict=True, assign=True)
    return model.eval()


def load_hf_model(ckpt_dir, dtype: torch.dtype = torch.float32):
    """transformers' InklingForCausalLM holding a native checkpoint dir (NVFP4 experts dequantized)."""
    from inkling_model.config import InklingConfig

    config = InklingConfig.from_pretrained(ckpt_dir)  # also reads checkpoint-only spellings
    return hf_model_from_tensors(config, read_tensors(ckpt_dir), dtype=dtype)

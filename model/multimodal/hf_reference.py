"""transformers' InklingForConditionalGeneration (the executable truth) on a native multimodal checkpoint.

Names go through transformers' own conversion mapping ("inkling_mm_model"), towers included
(``model.visual`` -> ``model.vision_tower``, ``layers.linear_i`` -> ``encoder_layers.i.projection``,
``model.audio.encoder`` -> ``audio_tower.embed_audio_tokens.embed_audio_tokens``, ...). NVFP4 routed
experts are dequantized first. :func:`hf_inputs` builds its forward's keyword arguments from the
same :class:`MediaInputs` inkling_model takes.
"""

from __future__ import annotations

import dataclasses

import torch

from inkling_model.checkpoint.hf_reference import _cast, dequantize_experts, hf_text_config, to_hf_state_dict
from inkling_model.checkpoint.shards import CheckpointError, read_tensors

from .config import MultimodalConfig
from .processor import MediaInputs


def hf_config(config, mm: MultimodalConfig):
    """transformers' InklingConfig (eager attention) for (text config, towers)."""
    from transformers.models.inkling import InklingConfig

    text = hf_text_config(config)
    hf = InklingConfig(text_config=text.to_dict(), vision_config=dataclasses.asdict(mm.vision),
                       audio_config=dataclasses.asdict(mm.audio), image_token_id=mm.image_token_id,
                       audio_token_id=mm.audio_token_id, image_bos_token_id=mm.image_bos_token_id,
                       audio_bos_token_id=mm.audio_bos_token_id)
    hf._attn_implementation = "eager"
    hf.text_config._attn_implementation = "eager"
    return hf


def to_hf_mm_state_dict(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Native (dense) names -> InklingForConditionalGeneration state-dict names."""
    return to_hf_state_dict(tensors, strip_mm=False)


def hf_mm_model_from_tensors(config, mm: MultimodalConfig, tensors: dict[str, torch.Tensor], dtype=torch.float32):
    """InklingForConditionalGeneration holding exactly these native tensors."""
    from transformers.models.inkling import InklingForConditionalGeneration

    state = to_hf_mm_state_dict(dequantize_experts(tensors))
    with torch.device("meta"):
        model = InklingForConditionalGeneration(hf_config(config, mm))
    expected = {n for n in model.state_dict() if not n.endswith("audio_tokens_offsets")}
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        what = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"transformers' Inkling: {what} ({len(missing)} missing, {len(unexpected)} unexpected)")
    model.load_state_dict({n: _cast(n, t, dtype) for n, t in state.items()}, strict=False, assign=True)
    a = model.config.audio_config
    emb = model.model.audio_tower.embed_audio_tokens
    emb.audio_tokens_offsets = torch.arange(a.n_mel_bins) * a.mel_vocab_size  # a non-persistent buffer
    return model.eval()


def load_hf_mm_model(ckpt_dir, dtype: torch.dtype = torch.float32):
    """transformers' InklingForConditionalGeneration on a native multimodal checkpoint dir."""
    from .checkpoint import read_multimodal_config

    config, mm = read_multimodal_config(ckpt_dir)
    return hf_mm_model_from_tensors(config, mm, read_tensors(ckpt_dir), dtype=dtype)


def step(mm: MultimodalConfig, input_ids: torch.Tensor, media: MediaInputs | None) -> list:
    """``inkling_probe.step()`` for a transformers forward, declaring the modality layout (meta
    ``media`` on every tensor of the step, the fused stream's included) as inkling_model's dumps do."""
    import inkling_probe

    from .processor import media_layout

    layout = media_layout(input_ids.view(-1), mm, media) if media is not None and not media.empty else []
    inkling_probe.step(forward="eager", media=layout)
    return layout


def hf_inputs(input_ids: torch.Tensor, media: MediaInputs | None) -> dict:
    """Keyword arguments of transformers' forward for ``input_ids [T]`` and ``media``."""
    out = {"input_ids": input_ids.view(1, -1)}
    if media is not None and media.pixel_values is not None:
        out["pixel_values"] = media.pixel_values
    if media is not None and media.audio_ids is not None:
        out["audio_input_ids"] = media.audio_ids.unsqueeze(0)  # [1, frames, bins]: all frames valid
    return out

"""Tower configurations and the multimodal token ids, field names as transformers' InklingVisionConfig,
InklingAudioConfig and InklingConfig (model_type ``inkling_mm_model``).

A multimodal checkpoint's config.json is transformers' nested form: ``text_config`` (the text
decoder, :class:`inkling_model.config.InklingConfig`), ``vision_config``, ``audio_config`` and the
token ids at the top. Presets follow the text presets: ``tiny`` (2x2-pixel patches, a 3-layer
tower, 8 mel bins: a CPU forward in milliseconds), ``small`` (4x4 patches) and ``full`` (the
production layout: 40x40 patches over two frames, 6 hMLP layers, 80 mel bins x 16 levels).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inkling_model.config import InklingConfig


@dataclass
class VisionConfig:
    """The hMLP vision tower (transformers' InklingVisionConfig)."""

    patch_size: int = 40
    temporal_patch_size: int = 2
    num_channels: int = 3
    num_hidden_layers: int = 6
    text_hidden_size: int = 6144
    hidden_size: int = 1024  # unused by the hMLP tower; kept for config.json parity
    num_attention_heads: int = 16  # likewise
    rms_norm_eps: float = 1e-6


@dataclass
class AudioConfig:
    """The dMel audio tower (transformers' InklingAudioConfig)."""

    n_mel_bins: int = 80
    mel_vocab_size: int = 16
    text_hidden_size: int = 6144
    rms_norm_eps: float = 1e-6


@dataclass
class MultimodalConfig:
    """Towers plus the placeholder / begin-of-media token ids the processor and fusion use."""

    vision: VisionConfig = field(default_factory=VisionConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    image_token_id: int = 200054
    audio_token_id: int = 200053
    image_bos_token_id: int = 200005
    audio_bos_token_id: int = 200020
    # the processor's dMel quantisation (InklingProcessor): levels are audio.mel_vocab_size
    dmel_min_value: float = -7.0
    dmel_max_value: float = 2.0
    sampling_rate: int = 16000

    @classmethod
    def preset(cls, name: str, text: InklingConfig) -> "MultimodalConfig":
        """The towers for text preset ``name`` (token ids inside ``text``'s vocabulary)."""
        if name not in _PRESETS:
            raise ValueError(f"unknown preset {name!r} (known: {', '.join(_PRESETS)})")
        p = _PRESETS[name]
        h = text.hidden_size
        top = text.vocab_size if name != "full" else None
        ids = {} if top is None else dict(image_token_id=top - 2, audio_token_id=top - 3,
                                          image_bos_token_id=top - 4, audio_bos_token_id=top - 5)
        return cls(vision=VisionConfig(text_hidden_size=h, **p["vision"]),
                   audio=AudioConfig(text_hidden_size=h, **p["audio"]), **ids)

    def check(self, text: InklingConfig) -> None:
        """Raise ValueError (one line) unless the towers and ids fit ``text``."""
        for what, cfg in (("vision_config", self.vision), ("audio_config", self.audio)):
            if cfg.text_hidden_size != text.hidden_size:
                raise ValueError(f"{what}.text_hidden_size {cfg.text_hidden_size} != hidden_size {text.hidden_size}")
        for key in ("image_token_id", "audio_token_id", "image_bos_token_id", "audio_bos_token_id"):
            v = getattr(self, key)
            if not 0 <= v < text.vocab_size:
                raise ValueError(f"{key} {v} is outside the vocabulary [0, {text.vocab_size})")
        if self.image_token_id == self.audio_token_id:
            raise ValueError(f"image_token_id and audio_token_id are both {self.image_token_id}")

    # ---- config.json ---------------------------------------------------------------------
    def to_dict(self, text: InklingConfig) -> dict[str, Any]:
        """transformers' nested InklingConfig dict (model_type inkling_mm_model)."""
        text_d = text.to_dict()
        text_d["model_type"] = "inkling_text"
        text_d.pop("architectures", None)
        d = {"architectures": ["InklingForConditionalGeneration"], "model_type": "inkling_mm_model",
             "text_config": text_d,
             "vision_config": {"model_type": "inkling_vision", **dataclasses.asdict(self.vision)},
             "audio_config": {"model_type": "inkling_audio", **dataclasses.asdict(self.audio)}}
        for f in dataclasses.fields(self):
            if f.name not in ("vision", "audio"):
                d[f.name] = getattr(self, f.name)
        for key in ("eos_token_id", "bos_token_id"):
            d[key] = getattr(text, key)
        return d

    def save(self, text: InklingConfig, path: str | Path) -> Path:
        """Write ``<dir>/config.json`` (the nested form); returns its path."""
        out = Path(path) / "config.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.to_dict(text), indent=2) + "\n")
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MultimodalConfig | None":
        """The towers of a nested config.json dict; None for a text-only config."""
        if not isinstance(d.get("vision_config"), dict) or not isinstance(d.get("audio_config"), dict):
            return None
        vis = _pick(VisionConfig, d["vision_config"], {"n_layers": "num_hidden_layers"})
        aud = _pick(AudioConfig, d["audio_config"], {"num_codebooks": "n_mel_bins",
                                                     "codebook_size": "mel_vocab_size",
                                                     "hidden_size": "text_hidden_size"})
        top = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d and f.name not in ("vision", "audio")}
        return cls(vision=vis, audio=aud, **top)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "MultimodalConfig | None":
        """Read ``<dir>/config.json``; None when it has no towers."""
        p = Path(path)
        p = p / "config.json" if p.is_dir() else p
        return cls.from_dict(json.loads(p.read_text()))


def _pick(klass, d: dict, aliases: dict):
    d = {aliases.get(k, k): v for k, v in d.items()}
    names = {f.name for f in dataclasses.fields(klass)}
    return klass(**{k: v for k, v in d.items() if k in names})


_PRESETS: dict[str, dict[str, Any]] = {
    # 3 hMLP layers: fold 2x2 space (12 -> 64), fold 2 frames (128 -> 1536), project to the text width
    "tiny": dict(vision=dict(patch_size=2, temporal_patch_size=2, num_hidden_layers=3),
                 audio=dict(n_mel_bins=8, mel_vocab_size=16)),
    "small": dict(vision=dict(patch_size=4, temporal_patch_size=2, num_hidden_layers=4),
                  audio=dict(n_mel_bins=80, mel_vocab_size=16)),
    "full": dict(vision=dict(patch_size=40, temporal_patch_size=2, num_hidden_layers=6),
                 audio=dict(n_mel_bins=80, mel_vocab_size=16)),
}

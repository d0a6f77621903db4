"""InklingConfig: the text decoder's configuration, field names as transformers' InklingTextConfig.

One dataclass; derived sizes are filled in ``__post_init__``. Presets: ``tiny`` (CPU tests, a
forward in well under a second), ``small`` (hundreds of MB, for benchmarks) and ``full``
(production shapes, for the meta device). ``save(dir)`` writes a flat ``config.json`` with
``model_type = "inkling_text"`` that ``transformers.InklingTextConfig.from_pretrained`` reads for
the same model; ``from_pretrained(dir)`` reads that, or a multimodal config.json (its
``text_config`` block), including the checkpoint-only spellings transformers accepts
(``dense_mlp_idx``, ``dense_intermediate_size``, ``sconv_kernel_size``, ...).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLIDING, FULL = "hybrid_sliding", "hybrid"
DENSE, SPARSE = "dense", "sparse"
QUANT_METHODS = (None, "nvfp4")

# transformers' attribute_map: checkpoint spelling -> field name
_ALIASES = {
    "embedding_multiplier": "logits_mup_width_multiplier",
    "sliding_window": "sliding_window_size",
    "num_local_experts": "n_routed_experts",
    "sconv_kernel_size": "conv_kernel_size",
    "model_max_length": "max_position_embeddings",
}
# generic keys of a transformers config.json that carry nothing for this model
_IGNORED = {"architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
            "output_hidden_states", "output_attentions", "return_dict", "use_cache",
            "tie_word_embeddings", "attention_dropout", "chunk_size_feed_forward",
            "is_encoder_decoder", "id2label", "label2id", "problem_type", "base_model_prefix"}


@dataclass
class InklingConfig:
    """Inkling text decoder configuration (see transformers' ``InklingTextConfig``)."""

    vocab_size: int = 201024
    unpadded_vocab_size: int | None = None
    hidden_size: int = 6144
    num_hidden_layers: int = 66
    num_attention_heads: int = 64
    num_key_value_heads: int = 8
    head_dim: int = 128
    swa_num_attention_heads: int = 64
    swa_num_key_value_heads: int = 16
    swa_head_dim: int = 128
    sliding_window_size: int = 512
    d_rel: int = 16
    rel_extent: int = 1024
    log_scaling_n_floor: int | None = None
    log_scaling_alpha: float = 0.1
    local_layer_ids: list[int] | None = None
    layer_types: list[str] | None = None
    max_position_embeddings: int = 131072
    rms_norm_eps: float = 1e-6
    conv_kernel_size: int = 4
    mlp_layer_types: list[str] | None = None
    intermediate_size: int = 24576
    hidden_act: str = "silu"
    moe_intermediate_size: int = 3072
    n_routed_experts: int = 256
    num_experts_per_tok: int = 6
    n_shared_experts: int = 2
    shared_expert_sink: bool = True
    route_scale: float = 8.0
    logits_mup_width_multiplier: float = 24.0
    rms_norm_eps_moe_gate: float = 1e-6
    initializer_range: float = 0.02
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    # quantization of the routed experts (not a transformers field)
    quant_method: str | None = None
    quant_first_layer: int = 3
    # keys of a config.json this class does not model, kept so save() writes them back
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.num_hidden_layers
        if self.layer_types is None:
            local = set(self.local_layer_ids) if self.local_layer_ids is not None else {
                i for i in range(n) if (i + 1) % 6}
            self.layer_types = [SLIDING if i in local else FULL for i in range(n)]
        if self.mlp_layer_types is None:
            self.mlp_layer_types = [SPARSE] * n
        self.layer_types, self.mlp_layer_types = list(self.layer_types), list(self.mlp_layer_types)
        self._check()

    def _check(self) -> None:
        n = self.num_hidden_layers
        if len(self.layer_types) != n or len(self.mlp_layer_types) != n:
            raise ValueError(f"layer_types/mlp_layer_types must have {n} entries")
        if set(self.layer_types) - {SLIDING, FULL}:
            raise ValueError(f"unknown layer type in {self.layer_types} (known: {SLIDING}, {FULL})")
        if set(self.mlp_layer_types) - {DENSE, SPARSE}:
            raise ValueError(f"unknown mlp layer type in {self.mlp_layer_types} (known: {DENSE}, {SPARSE})")
        if self.quant_method not in QUANT_METHODS:
            raise ValueError(f"unknown quant_method {self.quant_method!r} (known: None, 'nvfp4')")
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported (only silu)")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError("num_experts_per_tok exceeds n_routed_experts")

    # ---- derived sizes -------------------------------------------------------------------
    def is_sliding(self, i: int) -> bool:
        """True when layer i is a sliding-window ("hybrid_sliding") layer."""
        return self.layer_types[i] == SLIDING

    def is_moe(self, i: int) -> bool:
        """True when layer i has the MoE ("sparse") MLP."""
        return self.mlp_layer_types[i] == SPARSE

    def attn_dims(self, i: int) -> tuple[int, int, int, int, int | None]:
        """(total q heads, total kv heads, head_dim, rel-bias extent, window or None) of layer i."""
        if self.is_sliding(i):
            return (self.swa_num_attention_heads, self.swa_num_key_value_heads, self.swa_head_dim,
                    self.sliding_window_size, self.sliding_window_size)
        return self.num_attention_heads, self.num_key_value_heads, self.head_dim, self.rel_extent, None

    @property
    def logits_vocab_size(self) -> int:
        """Number of logits returned: the head's used rows."""
        return self.unpadded_vocab_size if self.unpadded_vocab_size is not None else self.vocab_size

    def expert_quant(self, layer_idx: int) -> str | None:
        """Quantization of layer ``layer_idx``'s routed experts: "nvfp4" or None (bf16/fp32)."""
        if self.quant_method is None or not self.is_moe(layer_idx):
            return None
        return self.quant_method if layer_idx >= self.quant_first_layer else None

    # ---- presets -------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "InklingConfig":
        """Named shapes: "tiny", "small" or "full"; keyword overrides replace preset fields."""
        if name not in _PRESETS:
            raise ValueError(f"unknown preset {name!r} (known: {', '.join(_PRESETS)})")
        kwargs = dict(_PRESETS[name])
        kwargs.update(overrides)
        return cls(**kwargs)

    # ---- config.json ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InklingConfig":
        """Build from a config.json dict (flat text config or multimodal with ``text_config``)."""
        d = dict(d)
        if isinstance(d.get("text_config"), dict):
            top = d
            d = dict(d["text_config"])
            for key in ("eos_token_id", "bos_token_id", "pad_token_id", "quantization_config"):
                if key in top and key not in d:
                    d[key] = top[key]
        for alias, name in _ALIASES.items():
            if alias in d:
                d.setdefault(name, d.pop(alias))
        n = d.get("num_hidden_layers", cls.num_hidden_layers)
        if "mlp_layer_types" not in d or d["mlp_layer_types"] is None:
            dense = d.pop("dense_mlp_idx", 0)
            d["mlp_layer_types"] = [DENSE if i < dense else SPARSE for i in range(n)]
        d.pop("dense_mlp_idx", None)
        if d.get("dense_intermediate_size") is not None:  # as transformers (#49416)
            d["moe_intermediate_size"] = d["intermediate_size"]
            d["intermediate_size"] = d.pop("dense_intermediate_size")
        d.pop("dense_intermediate_size", None)
        if "quant_method" not in d and isinstance(d.get("quantization_config"), dict):
            d["quant_method"] = _quant_from_hf(d.pop("quantization_config"))
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        extra = dict(d.pop("extra", {}) or {})
        extra.update({k: v for k, v in d.items() if k not in names and k not in _IGNORED})
        return cls(**{k: v for k, v in d.items() if k in names}, extra=extra)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "InklingConfig":
        """Read ``<dir>/config.json`` (or a path to a config.json file)."""
        p = Path(path)
        p = p / "config.json" if p.is_dir() else p
        if not p.is_file():
            raise FileNotFoundError(f"no config.json at {p}")
        return cls.from_dict(json.loads(p.read_text()))

    def to_dict(self) -> dict[str, Any]:
        """The config.json content: transformers' InklingTextConfig fields plus the quant fields."""
        d = {"architectures": ["InklingForCausalLM"], "model_type": "inkling_text"}
        d.update(self.extra)
        for f in dataclasses.fields(self):
            if f.name != "extra":
                d[f.name] = getattr(self, f.name)
        return d

    def save(self, path: str | Path) -> Path:
        """Write ``<dir>/config.json``; returns its path."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        out = p / "config.json"
        out.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return out


def _quant_from_hf(q: dict[str, Any]) -> str | None:
    algo = str(q.get("quant_algo", q.get("quant_method", ""))).lower()
    if "nvfp4" in algo or "fp4" in algo:
        return "nvfp4"
    raise ValueError(f"quantization_config {q} is not supported (only NVFP4 routed experts)")


def _mlp_types(n: int, dense: int) -> list[str]:
    return [DENSE if i < dense else SPARSE for i in range(n)]


_PRESETS: dict[str, dict[str, Any]] = {
    # layer 5 is full attention ((5+1) % 6 == 0), 0-1 dense, 2 MoE bf16, 3-5 MoE (NVFP4 when quantized).
    # Window 8, rel_extent 16 and log scaling from position 8 so short test prompts exercise all of them.
    "tiny": dict(
        vocab_size=512, hidden_size=128, num_hidden_layers=6,
        num_attention_heads=8, num_key_value_heads=4, head_dim=16,
        swa_num_attention_heads=8, swa_num_key_value_heads=8, swa_head_dim=16,
        sliding_window_size=8, d_rel=4, rel_extent=16, log_scaling_n_floor=8, log_scaling_alpha=0.1,
        max_position_embeddings=4096, intermediate_size=256, moe_intermediate_size=64,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=2, mlp_layer_types=_mlp_types(6, 2),
        bos_token_id=1, eos_token_id=2,
    ),
    # ~85M parameters: ~170 MB in bf16
    "small": dict(
        vocab_size=32000, hidden_size=512, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=4, head_dim=64,
        swa_num_attention_heads=8, swa_num_key_value_heads=8, swa_head_dim=64,
        sliding_window_size=128, d_rel=16, rel_extent=256, max_position_embeddings=8192,
        intermediate_size=1536, moe_intermediate_size=256, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=2, mlp_layer_types=_mlp_types(8, 2), bos_token_id=1, eos_token_id=2,
    ),
    # production shapes (INKLING.md)
    "full": dict(
        vocab_size=201024, unpadded_vocab_size=200058, hidden_size=6144, num_hidden_layers=66,
        num_attention_heads=64, num_key_value_heads=8, head_dim=128,
        swa_num_attention_heads=64, swa_num_key_value_heads=16, swa_head_dim=128,
        sliding_window_size=512, d_rel=16, rel_extent=1024, log_scaling_n_floor=128000,
        log_scaling_alpha=0.1, max_position_embeddings=131072, intermediate_size=24576,
        moe_intermediate_size=3072, n_routed_experts=256, num_experts_per_tok=6, n_shared_experts=2,
        mlp_layer_types=_mlp_types(66, 2), route_scale=8.0, logits_mup_width_multiplier=24.0,
        eos_token_id=200006,
    ),
}

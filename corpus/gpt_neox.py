"""GPT-NeoX (fused per-head qkv, partial rotary, LayerNorm with biases, parallel residual).

Tiny: hidden 64, 4 layers, 4 heads (head 16, rotary on 4 dims), MLP 256, vocab 256. Keys start
``gpt_neox.layers.N``; attention returns (output, weights): ``attention.0``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from inkling_corpus import plant
from inkling_corpus.hf import Family, Mod
from inkling_corpus.regimes import benign_set, fault_case

NAME = "gpt_neox"
L = "gpt_neox.layers"
RATIO, CHANNEL, OFFSET = ("ratio",), ("channel",), ("offset", "bias")
OPAQUE = ("input", "weight", "kernel")


def make_config(**overrides) -> GPTNeoXConfig:
    kw = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
              vocab_size=256, max_position_embeddings=128, initializer_range=0.1, tie_word_embeddings=False)
    kw.update(overrides)
    return GPTNeoXConfig(**kw)


def attn_core(layer: int) -> tuple:
    return (f"{L}.{layer}.attention.0", f"{L}.{layer}.attention.dense.in.0")


def _qkv_concat_as_per_head(w: torch.Tensor, heads: int = 4) -> torch.Tensor:
    """Per-head [q_h, k_h, v_h] rows read as if they were concatenated [Q; K; V]."""
    return w.view(3, heads, -1, *w.shape[1:]).transpose(0, 1).reshape(w.shape)


def _gelu_tanh(module):
    return lambda x: F.gelu(x, approximate="tanh")


def _tie(model):
    model.lm_head.weight = model.gpt_neox.embed_in.weight


def _zero(w):
    return torch.zeros_like(w)


MODS = [
    Mod("dense_bias_dropped", plant.param(f"{L}.1.attention.dense", _zero, "bias"), (f"{L}.1.attention.dense",),
        OFFSET, note="attention output projection's bias not loaded", quick=True),
    Mod("qkv_bias_dropped", plant.param(f"{L}.3.attention.query_key_value", _zero, "bias"),
        (f"{L}.3.attention.query_key_value",), OFFSET, note="the fused qkv bias not loaded"),
    Mod("qkv_layout", plant.param(f"{L}.2.attention.query_key_value", _qkv_concat_as_per_head),
        (f"{L}.2.attention.query_key_value",), ("permut", "layout", "chunk"),
        note="per-head interleaved qkv rows taken as concatenated [Q; K; V]"),
    Mod("qkv_bias_layout", plant.param(f"{L}.2.attention.query_key_value", _qkv_concat_as_per_head, "bias"),
        (f"{L}.2.attention.query_key_value",), ("permut", "layout", "chunk", "offset"),
        note="the weight re-laid-out right, its bias not: only the bias rows are permuted", quick=True),
    Mod("rotary_full", lambda m: None, ("gpt_neox.rotary_emb.0", "gpt_neox.rotary_emb.1"), ("shape",) + OPAQUE,
        config={"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}},
        note="rotary applied to the whole head where the config says 25%"),
    Mod("ln_not_loaded", plant.param(f"{L}.2.post_attention_layernorm", torch.ones_like),
        (f"{L}.2.post_attention_layernorm",), CHANNEL, note="a LayerNorm weight left at ones"),
    Mod("final_ln_bias_dropped", plant.param("gpt_neox.final_layer_norm", _zero, "bias"),
        ("gpt_neox.final_layer_norm",), OFFSET, note="the final LayerNorm's bias not loaded"),
    Mod("sequential_residual", plant.attr(f"{L}.2", "use_parallel_residual", False),
        (f"{L}.2", f"{L}.2.post_attention_layernorm.in.0"), OPAQUE,
        note="one layer runs attention then MLP sequentially where the model is parallel-residual"),
    Mod("softmax_scale", plant.attr(f"{L}.1.attention", "scaling", 1 / 16), attn_core(1), OPAQUE,
        note="attention scaled by 1/head_dim instead of 1/sqrt(head_dim)"),
    Mod("mask_off_by_one", plant.kwarg(f"{L}.2.attention", "attention_mask", plant.mask_off_by_one),
        attn_core(2), OPAQUE, note="causal mask lets each token see the next one", quick=True),
    Mod("gelu_tanh", plant.replace_forward(f"{L}.1.mlp.act", _gelu_tanh), (f"{L}.1.mlp.act",), OPAQUE,
        note="tanh-approximate GELU where the checkpoint was trained with the exact one"),
    Mod("scale_4h_to_h_1.05", plant.scale(f"{L}.2.mlp.dense_4h_to_h", 1.05), (f"{L}.2.mlp.dense_4h_to_h",), RATIO,
        note="a 5% scale on one MLP's output projection"),
    Mod("embed_scaled", plant.scale("gpt_neox.embed_in", 8.0), ("gpt_neox.embed_in",), RATIO,
        note="embeddings multiplied by sqrt(hidden)"),
    Mod("lm_head_tied", _tie, ("lm_head",), OPAQUE, note="the output head tied to the embeddings"),
]

FAMILY = Family(NAME, make_config, GPTNeoXForCausalLM, {m.name: m for m in MODS})


def cases():
    return [fault_case(FAMILY, m) for m in MODS] + benign_set(NAME, quick=("threads_2",))


def record_many(items) -> dict:
    from inkling_corpus.hf import record_all

    return record_all(FAMILY, items)

"""Llama (dense, GQA, RoPE, RMSNorm): planted faults and benign pairs.

Tiny: hidden 64, 4 layers, 4 query heads over 2 kv heads (head_dim 16), MLP 128, vocab 256.
Keys are transformers module paths (``model.layers.1.mlp.down_proj``). A bug inside attention's
core (rope, mask, softmax scale, kv-head mapping) has no module output of its own: it is born in
``self_attn`` (output item 0), first visible as ``o_proj``'s recorded input.
"""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama as ml

from inkling_corpus import plant
from inkling_corpus.hf import Family, Mod
from inkling_corpus.regimes import benign_set, fault_case

NAME = "llama"
DECODE = 4  # decode steps of the decode cases
L = "model.layers"
RATIO, CHANNEL, OFFSET, PERM = ("ratio",), ("channel",), ("offset", "bias"), ("permut", "layout")
ROWS, ROUND, NAN, OPAQUE = ("row", "confined"), ("round",), ("nonfinite", "nan"), ("input", "weight", "kernel")


def make_config(**overrides) -> LlamaConfig:
    kw = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, initializer_range=0.1,
              tie_word_embeddings=False)
    kw.update(overrides)
    return LlamaConfig(**kw)


def attn_core(layer: int) -> tuple:
    return (f"{L}.{layer}.self_attn.0", f"{L}.{layer}.self_attn.o_proj.in.0")


def _rope_interleaved(orig):
    def apply(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

        def rot(x):
            return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        return q * cos + rot(q) * sin, k * cos + rot(k) * sin
    return apply


def _repeat_kv_tiled(orig):
    def repeat(h, n_rep):
        return h.repeat(1, n_rep, 1, 1)  # kv heads 0,1,0,1 instead of 0,0,1,1
    return repeat


def _norm_in_bf16(module):
    def forward(x):
        h = x.to(torch.bfloat16)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
        return (module.weight.to(torch.bfloat16) * h).to(x.dtype)
    return forward


def _residual_dropped(layer: str):
    """The layer returns its MLP output without adding the residual stream back."""
    def plant_(model):
        mid = {}
        block = model.get_submodule(layer)
        block.post_attention_layernorm.register_forward_pre_hook(lambda m, a: mid.update(h=a[0]))
        block.register_forward_hook(lambda m, a, out: out - mid["h"])
    return plant_


def _tie_lm_head(model):
    model.lm_head.weight = model.model.embed_tokens.weight


MODS = [
    Mod("scale_down_1.03", plant.scale(f"{L}.1.mlp.down_proj", 1.03), (f"{L}.1.mlp.down_proj",), RATIO,
        note="a 3% scale on one MLP's down_proj", quick=True),
    Mod("scale_o_1.05", plant.scale(f"{L}.2.self_attn.o_proj", 1.05), (f"{L}.2.self_attn.o_proj",), RATIO,
        note="a 5% scale on one o_proj"),
    Mod("scale_up_448", plant.scale(f"{L}.1.mlp.up_proj", 448.0), (f"{L}.1.mlp.up_proj",), RATIO,
        note="an fp8 scale (448) applied twice to up_proj"),
    Mod("scale_v_1_2688", plant.scale(f"{L}.2.self_attn.v_proj", 1 / 2688), (f"{L}.2.self_attn.v_proj",), RATIO,
        note="v_proj divided by 6*448 (a raw amax taken as a scale)"),
    Mod("gate_up_swapped", plant.swap(f"{L}.1.mlp.gate_proj.weight", f"{L}.1.mlp.up_proj.weight"),
        (f"{L}.1.mlp.gate_proj",), ("equal", "swap", "cross"),
        note="gate and up projections loaded into each other's place"),
    Mod("k_heads_reversed", plant.param(f"{L}.2.self_attn.k_proj", lambda w: plant.heads_reversed(w, 2)),
        (f"{L}.2.self_attn.k_proj",), PERM, note="k_proj rows in reverse head order (a TP shard order bug)"),
    Mod("norm_not_loaded", plant.param(f"{L}.2.post_attention_layernorm", torch.ones_like),
        (f"{L}.2.post_attention_layernorm",), CHANNEL, note="a norm weight left at its init (ones)", quick=True),
    Mod("norm_one_plus_w", plant.param(f"{L}.1.input_layernorm", lambda w: 1 + w),
        (f"{L}.1.input_layernorm",), CHANNEL, note="Gemma-style (1 + w) applied to a plain w norm"),
    Mod("rope_theta", lambda m: None, ("model.rotary_emb.0", "model.rotary_emb.1"), OPAQUE,
        config={"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
        note="rope theta 1e6 where the checkpoint says 1e4"),
    Mod("rope_interleaved", plant.during(f"{L}.1.self_attn", [(ml, "apply_rotary_pos_emb", _rope_interleaved)]),
        attn_core(1), OPAQUE, note="rotary applied to interleaved pairs instead of the two halves"),
    Mod("softmax_scale", plant.attr(f"{L}.2.self_attn", "scaling", 1 / 16), attn_core(2), OPAQUE,
        note="attention scaled by 1/head_dim instead of 1/sqrt(head_dim)"),
    Mod("gqa_tiled", plant.during(f"{L}.1.self_attn", [(ml, "repeat_kv", _repeat_kv_tiled)]), attn_core(1),
        ("head", "confined") + OPAQUE,
        note="kv heads repeated tiled (0,1,0,1) instead of interleaved (0,0,1,1)", quick=True),
    Mod("mask_off_by_one", plant.kwarg(f"{L}.2.self_attn", "attention_mask", plant.mask_off_by_one),
        attn_core(2), OPAQUE, note="causal mask lets each token see the next one"),
    Mod("residual_dropped", _residual_dropped(f"{L}.1"), (f"{L}.1",), OPAQUE,
        note="the layer's MLP residual add is missing"),
    Mod("rows_5_9", plant.output(f"{L}.1.mlp.down_proj", lambda t: plant.rows(t, (5, 9), 1.25)),
        (f"{L}.1.mlp.down_proj",), ROWS, note="two token rows scaled by 1.25 (a scatter/padding bug)"),
    Mod("round_bf16", plant.output(f"{L}.2.self_attn.o_proj", plant.round_to(torch.bfloat16)),
        (f"{L}.2.self_attn.o_proj",), ROUND, regimes=("fp32",), note="one op's output rounded to bf16"),
    Mod("round_fp8", plant.output(f"{L}.2.self_attn.o_proj", plant.round_to(torch.float8_e4m3fn)),
        (f"{L}.2.self_attn.o_proj",), ROUND, note="one op's output rounded to fp8 e4m3"),
    Mod("norm_in_bf16", plant.replace_forward(f"{L}.1.input_layernorm", _norm_in_bf16),
        (f"{L}.1.input_layernorm",), ("round", "dtype"), note="RMSNorm computed in bf16 (no fp32 upcast)"),
    Mod("nan_act", plant.output(f"{L}.2.mlp.act_fn", lambda t: plant.nan_at(t, (0, 7, 5))),
        (f"{L}.2.mlp.act_fn",), NAN, note="one NaN out of an activation kernel"),
    Mod("embed_scaled", plant.scale("model.embed_tokens", 8.0), ("model.embed_tokens",), RATIO,
        note="embeddings multiplied by sqrt(hidden) (a normalizer from another architecture)"),
    Mod("lm_head_tied", _tie_lm_head, ("lm_head",), OPAQUE,
        note="lm_head tied to the embeddings in an untied checkpoint"),
    Mod("decode_only_scale", plant.from_call(f"{L}.2.self_attn.o_proj", 2, lambda t: t * 1.05),
        (f"{L}.2.self_attn.o_proj",), RATIO, step=2,
        note="from decode step 2 on, o_proj's output x1.05 (a kernel only the decode path runs): "
             "the same error at steps 2-4; the culprit is (o_proj, step 2), not a later step"),
    Mod("decode_drift", plant.drifting(f"{L}.2.self_attn.o_proj", 2, 0.02),
        (f"{L}.2.self_attn.o_proj",), RATIO, step=2, quick=True,
        note="from decode step 2 on, o_proj's output x1.02, x1.04, x1.06 (a per-step state that drifts): "
             "born at step 2, largest at step 4"),
    Mod("scale_q_1.02_l0", plant.scale(f"{L}.0.self_attn.q_proj", 1.02), (f"{L}.0.self_attn.q_proj",), RATIO,
        note="a 2% scale on layer 0's q_proj: small where born, through softmax downstream"),
]

FAMILY = Family(NAME, make_config, LlamaForCausalLM, {m.name: m for m in MODS})


def cases():
    decode = [fault_case(FAMILY, m, decode=DECODE) for m in MODS if m.name.startswith("decode_")]
    return [fault_case(FAMILY, m) for m in MODS if not m.name.startswith("decode_")] + decode + benign_set(
        NAME, [("decode_threads_2", {"threads": 2, "decode": DECODE}, "prefill + 4 decode steps, threads 1 vs 2")],
        quick=("bf16_vs_fp32", "sdpa_vs_eager", "batch4_row2"))


def record_many(items) -> dict:
    from inkling_corpus.hf import record_all

    return record_all(FAMILY, items)

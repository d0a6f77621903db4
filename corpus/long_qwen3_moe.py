"""Qwen3-MoE at 512 tokens (issue 41; faults and pairs in :mod:`.long_moe`).

Tiny: hidden 64, 4 layers (all MoE), 4 query heads over 2 kv heads (head_dim 16, q/k norms),
8 experts top-2, expert MLP 32, no shared expert; the router softmax is fp32.
"""
from __future__ import annotations

from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from inkling_corpus import long_moe

NAME = "long_qwen3_moe"


def make_config(**overrides) -> Qwen3MoeConfig:
    kw = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
              decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, vocab_size=256,
              max_position_embeddings=1024, initializer_range=0.1, tie_word_embeddings=False)
    kw.update(overrides)
    return Qwen3MoeConfig(**kw)


FAMILY = long_moe.family(NAME, make_config, Qwen3MoeForCausalLM)


def cases():
    return long_moe.cases(FAMILY)


def record_many(items) -> dict:
    from inkling_corpus.hf import record_all

    return record_all(FAMILY, items)

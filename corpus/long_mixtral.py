"""Mixtral at 512 tokens (issue 41; faults and pairs in :mod:`.long_moe`).

Tiny: hidden 64, 4 layers (all MoE), 4 query heads over 2 kv heads, 8 experts top-2 (weights
renormalised over the two), expert MLP 64, no shared expert.
"""
from __future__ import annotations

from transformers import MixtralConfig, MixtralForCausalLM

from inkling_corpus import long_moe

NAME = "long_mixtral"


def make_config(**overrides) -> MixtralConfig:
    kw = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, vocab_size=256,
              max_position_embeddings=1024, initializer_range=0.1, tie_word_embeddings=False)
    kw.update(overrides)
    return MixtralConfig(**kw)


FAMILY = long_moe.family(NAME, make_config, MixtralForCausalLM)


def cases():
    return long_moe.cases(FAMILY)


def record_many(items) -> dict:
    from inkling_corpus.hf import record_all

    return record_all(FAMILY, items)

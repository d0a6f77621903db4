"""DeepSeek-V3 at 512 tokens (issue 41; faults and pairs in :mod:`.long_moe`).

Tiny: hidden 64, 4 layers (layer 0 dense: first_k_dense_replace 1), MLA attention (4 heads,
q_lora_rank 32, kv_lora_rank 32, qk_nope 16 + qk_rope 8 (interleaved), v_head_dim 16), 8 routed
experts top-2 with grouped sigmoid routing (n_group 4, topk_group 2, weights renormalised then
x2.5), expert MLP 32, one shared expert added after the routed sum (``mlp.shared_experts``).

sdpa_vs_eager has a third regime, ``bf16+eagerctl``: the fp32 eager reference, the bf16 sdpa
candidate and a bf16 *eager* control, so the control's floor holds the dtype but not the kernel
(the corpus's usual control, bf16 sdpa on 2 threads, is the candidate's own kernel).
"""
from __future__ import annotations

from dataclasses import replace

from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

from inkling_corpus import long_moe
from inkling_corpus.case import Run, Trio

NAME = "long_deepseek_v3"


def make_config(**overrides) -> DeepseekV3Config:
    kw = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
              qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2,
              n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
              norm_topk_prob=True, vocab_size=256, max_position_embeddings=1024, initializer_range=0.1,
              tie_word_embeddings=False)
    kw.update(overrides)
    return DeepseekV3Config(**kw)


FAMILY = long_moe.family(NAME, make_config, DeepseekV3ForCausalLM)


def _eager_control(case):
    if case.name != f"{NAME}/sdpa_vs_eager":
        return case
    ref = Run(NAME)
    trio = Trio(ref, ref.with_(dtype="bf16", attn="sdpa"), ref.with_(dtype="bf16"))
    return replace(case, regimes={**case.regimes, "bf16+eagerctl": trio})


def cases():
    return [_eager_control(c) for c in long_moe.cases(FAMILY)]


def record_many(items) -> dict:
    from inkling_corpus.hf import record_all

    return record_all(FAMILY, items)

"""Qwen3-MoE decoding through generate() (issue 41; faults and pairs in :mod:`.decode_faults`).

The tiny Qwen3-MoE of :mod:`.long_qwen3_moe` (hidden 64, 4 MoE layers, 8 experts top-2, q/k norms),
fed a 64-token prompt and generating 24 tokens with a KV cache; candidates teacher-forced to the
reference's tokens. Each decode step routes one token: bf16 flips its near-tie routing decisions.
"""
from __future__ import annotations

from transformers import Qwen3MoeForCausalLM

from inkling_corpus import decode_faults, long_qwen3_moe

NAME = "decode_moe"
FAMILY = decode_faults.family(NAME, long_qwen3_moe.make_config, Qwen3MoeForCausalLM, moe=True)


def cases():
    return decode_faults.cases(FAMILY)


def record_many(items) -> dict:
    from inkling_corpus.decode import record_all

    return record_all(FAMILY, items)

"""Llama decoding through generate() (issue 41; faults and pairs in :mod:`.decode_faults`).

The tiny Llama of :mod:`.llama` (hidden 64, 4 layers, GQA 4/2, RoPE), fed a 64-token prompt and
generating 24 tokens with a KV cache; candidates teacher-forced to the reference's tokens.
"""
from __future__ import annotations

from transformers import LlamaForCausalLM

from inkling_corpus import decode_faults, llama

NAME = "decode_llama"
FAMILY = decode_faults.family(NAME, llama.make_config, LlamaForCausalLM, moe=False)


def cases():
    return decode_faults.cases(FAMILY)


def record_many(items) -> dict:
    from inkling_corpus.decode import record_all

    return record_all(FAMILY, items)

"""The corpus's families: each module gives ``cases()`` and ``record_many([(run, dump), ...])``."""
from __future__ import annotations

import importlib

NAMES = ("llama", "qwen2_moe", "gpt_neox", "inkling", "late", "multimodal", "long_qwen3_moe", "long_mixtral",
         "long_deepseek_v3", "decode_llama", "decode_moe")


def load(names=NAMES) -> dict:
    """Family name -> module (imported on demand: transformers is slow to import)."""
    return {n: importlib.import_module(f"inkling_corpus.{n}") for n in names}

"""Test helper: tiny transformers models (random weights), importable as ``tiny_hf`` from every test
folder under tests/inkling_probe, like ``dumps`` and ``hunts``."""
from __future__ import annotations

import pytest
import torch

IDS = torch.tensor([[5, 17, 99, 3, 42, 7]])


def llama(hidden: int = 32, layers: int = 1):
    """A LlamaForCausalLM of vocabulary 128 (``IDS`` fits)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def inkling(hidden: int = 64, layers: int = 6, vocab: int = 256, heads: int = 4):
    """transformers' InklingForCausalLM (MoE from its default layer on, sliding and full attention)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.InklingTextConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads // 2, head_dim=16, swa_num_attention_heads=heads,
        swa_num_key_value_heads=heads // 2, swa_head_dim=16, intermediate_size=2 * hidden,
        moe_intermediate_size=hidden // 2, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=2 if hidden >= 64 else 1, sliding_window_size=8, rel_extent=16)
    torch.manual_seed(0)
    return transformers.InklingForCausalLM(cfg).eval()

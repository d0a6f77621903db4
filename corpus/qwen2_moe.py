"""Qwen2-MoE (routed experts + a gated shared expert): planted faults and benign pairs.

Tiny: hidden 64, 4 layers (layer 0 dense, 1-3 MoE), 8 experts, top-2, expert MLP 32, shared 64.
The router ``mlp.gate`` returns (logits, top-k weights, top-k ids): keys ``mlp.gate.0/.1/.2``;
``mlp.experts`` is the routed sum over flattened ``[T, H]`` tokens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

from inkling_corpus import plant
from inkling_corpus.hf import Family, Mod
from inkling_corpus.regimes import benign_set, fault_case

NAME = "qwen2_moe"
L = "model.layers"
OPAQUE = ("input", "weight", "kernel")


def make_config(**overrides) -> Qwen2MoeConfig:
    kw = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, num_experts=8,
              num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[0], norm_topk_prob=False,
              vocab_size=256, max_position_embeddings=128, initializer_range=0.1, tie_word_embeddings=False)
    kw.update(overrides)
    return Qwen2MoeConfig(**kw)


def experts(layer: int) -> tuple:
    """A bug in the experts' own weights: born in ``experts``, first visible as the input the
    experts' GEMM hands to its activation (``experts.act_fn.in.0``, one call per expert)."""
    return (f"{L}.{layer}.mlp.experts", f"{L}.{layer}.mlp.experts.act_fn.in.0")


def gate(layer: int) -> tuple:
    return tuple(f"{L}.{layer}.mlp.gate.{i}" for i in range(3))


def _router(bias_expert=None, bias=0.0, softmax_dtype=torch.float32):
    """A router forward with a bias on one expert's logit, or its softmax in another dtype."""
    def make(module):
        def forward(hidden_states):
            h = hidden_states.reshape(-1, module.hidden_dim)
            logits = F.linear(h, module.weight)  # [T, E]
            if bias_expert is not None:
                logits = logits.clone()
                logits[:, bias_expert] += bias
            probs = F.softmax(logits.to(softmax_dtype), dim=-1)
            top, idx = torch.topk(probs, module.top_k, dim=-1)  # [T, k]
            if module.norm_topk_prob:
                top = top / top.sum(dim=-1, keepdim=True)
            return logits, top.to(logits.dtype), idx
        return forward
    return make


def _expert_copied(path: str, dst: int, src: int):
    def edit(w):
        w = w.clone()
        w[dst] = w[src]
        return w
    return plant.compose(plant.param(path, edit, "gate_up_proj"), plant.param(path, edit, "down_proj"))


def _experts_rolled(path: str):
    roll = lambda w: w.roll(1, dims=0)
    return plant.compose(plant.param(path, roll, "gate_up_proj"), plant.param(path, roll, "down_proj"))


def _topk_reversed(model):
    """Every router returns its top-k in reverse order (topk(sorted=False)): the same decisions."""
    for name, m in model.named_modules():
        if name.endswith("mlp.gate"):
            m.register_forward_hook(lambda mod, a, out: (out[0], out[1].flip(-1), out[2].flip(-1)))


def _no_sigmoid(orig):
    return lambda x: torch.ones_like(x)


MODS = [
    Mod("expert3_is_expert5", _expert_copied(f"{L}.1.mlp.experts", 3, 5), experts(1),
        ("confined", "row", "expert"), quick=True,
        note="expert 3 loaded with expert 5's weights (an expert-id map bug)"),
    Mod("gate_up_interleaved",
        plant.param(f"{L}.2.mlp.experts", lambda w: plant.interleave_rows(w, 1), "gate_up_proj"),
        experts(2), ("permut", "layout") + OPAQUE,
        note="concatenated [gate; up] expert weights read as interleaved"),
    Mod("experts_rolled", _experts_rolled(f"{L}.2.mlp.experts"), experts(2), ("permut", "layout") + OPAQUE,
        note="every expert holds the previous expert's weights (expert-parallel offset bug)"),
    Mod("router_bias", plant.replace_forward(f"{L}.1.mlp.gate", _router(2, 1.0)), gate(1),
        ("offset", "bias", "channel"),
        note="a +1.0 bias on one expert's router logit"),
    Mod("router_bias_small", plant.replace_forward(f"{L}.2.mlp.gate", _router(6, 0.1)), gate(2),
        ("offset", "bias", "channel"), quick=True,
        note="a +0.1 router bias: small where born, flips near-tie tokens downstream"),
    Mod("topk_1", plant.attr(f"{L}.2.mlp.gate", "top_k", 1), gate(2), ("shape",) + OPAQUE,
        note="top-1 routing where the config says top-2"),
    Mod("norm_topk_prob", plant.attr(f"{L}.1.mlp.gate", "norm_topk_prob", True), gate(1), ("row",),
        note="top-k weights renormalised where the checkpoint does not"),
    Mod("router_softmax_bf16", plant.replace_forward(f"{L}.1.mlp.gate", _router(softmax_dtype=torch.bfloat16)),
        gate(1), ("round", "dtype"), note="router softmax computed in bf16 instead of fp32"),
    Mod("shared_scale_1.05", plant.scale(f"{L}.2.mlp.shared_expert.down_proj", 1.05),
        (f"{L}.2.mlp.shared_expert.down_proj",), ("ratio",), note="a 5% scale on the shared expert"),
    Mod("experts_scale_1.03", plant.scale(f"{L}.1.mlp.experts", 1.03, "down_proj"), (f"{L}.1.mlp.experts",),
        ("ratio",), note="a 3% scale on every routed expert"),
    Mod("expert_rows_3_11", plant.output(f"{L}.1.mlp.experts", lambda t: plant.rows(t, (3, 11), 1.25, 0)),
        (f"{L}.1.mlp.experts",), ("row", "confined"), note="two tokens' routed outputs scaled by 1.25", quick=True),
    Mod("nan_expert", plant.output(f"{L}.2.mlp.experts", lambda t: plant.nan_at(t, (7, 5))), (f"{L}.2.mlp.experts",),
        ("nonfinite", "nan"), note="one NaN out of the expert kernel"),
    Mod("shared_gate_missing", plant.during(f"{L}.1.mlp", [(F, "sigmoid", _no_sigmoid)]), (f"{L}.1.mlp",), OPAQUE,
        note="the shared expert's sigmoid gate not applied"),
    Mod("topk_reversed", _topk_reversed, note="benign: top-k ids in another order"),
]

FAMILY = Family(NAME, make_config, Qwen2MoeForCausalLM, {m.name: m for m in MODS})

BENIGN = [
    ("experts_grouped_mm", {"experts": "grouped_mm"}, "grouped-GEMM expert kernel vs the per-expert loop"),
    ("experts_batched_mm", {"experts": "batched_mm"}, "batched expert kernel vs the per-expert loop"),
    ("topk_unsorted", {"mod": "topk_reversed"}, "top-k ids returned in another order (sorted=False)"),
]


def cases():
    return ([fault_case(FAMILY, m) for m in MODS if m.truth]
            + benign_set(NAME, BENIGN, prompts=(0, 1, 2),
                         quick=("bf16_vs_fp32_p1", "topk_unsorted", "experts_batched_mm", "experts_grouped_mm")))


def record_many(items) -> dict:
    from inkling_corpus.hf import record_all

    return record_all(FAMILY, items)

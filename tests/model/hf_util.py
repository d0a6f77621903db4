"""Test helpers: a random transformers Inkling for an InklingConfig, and its weights under native names.

The native names are the checkpoint's (``model.llm.`` removed); the conversion is transformers'
conversion mapping ("inkling_mm_model") run backwards: gate/up (concatenated in transformers)
interleave back into w13, ``e_score_correction_bias`` is ``mlp.gate.bias``, convs drop ``conv1d``.
"""

from __future__ import annotations

import re

import torch

KEEP_FP32 = ("attn_sconv", "mlp_sconv", "k_sconv", "v_sconv", "e_score_correction_bias", "gate.global_scale")


def hf_config(cfg):
    from transformers.models.inkling import InklingTextConfig

    d = {k: v for k, v in cfg.to_dict().items() if k not in ("architectures", "model_type")}
    hcfg = InklingTextConfig(**d)
    hcfg._attn_implementation = "eager"
    hcfg._experts_implementation = "eager"
    return hcfg


def hf_model(cfg, seed: int = 0, dtype=torch.float32):
    """transformers' InklingForCausalLM with random weights, norms/scales/bias perturbed from 1/0.

    bf16: cast as from_pretrained does (short convs, router bias and global scale stay fp32).
    """
    from transformers.models.inkling import InklingForCausalLM as HF

    torch.manual_seed(seed)
    model = HF(hf_config(cfg)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("norm.weight"):
                t.copy_(1 + 0.3 * torch.randn(t.shape, generator=g))
            elif name.endswith("global_scale"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            elif name.endswith("e_score_correction_bias"):
                t.copy_(0.05 * torch.randn(t.shape, generator=g))
            elif name.endswith("rel_logits_proj.proj"):
                t.copy_(0.5 * torch.randn(t.shape, generator=g))
    if dtype != torch.float32:  # as from_pretrained: keep-fp32 tensors are never rounded to dtype
        keep = {n: t.detach().clone() for n, t in list(model.named_parameters()) + list(model.named_buffers())
                if any(p in n for p in KEEP_FP32)}
        model.to(dtype)
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            if n in keep:
                t.data = keep[n]
    return model


def interleave(gate: torch.Tensor, up: torch.Tensor, dim: int) -> torch.Tensor:
    """[g0, u0, g1, u1, ...] along ``dim`` from separate gate and up."""
    return torch.stack([gate, up], dim=dim + 1).flatten(dim, dim + 1)


_RENAMES = [
    (r"model\.embed_tokens\.embed_norm\.weight", "embed_norm.weight"),
    (r"model\.embed_tokens\.weight", "embed.weight"),
    (r"model\.norm\.weight", "norm.weight"),
    (r"lm_head\.weight", "unembed.weight"),
    (r"model\.layers\.", "layers."),
    (r"self_attn\.q_proj", "attn.wq_du"), (r"self_attn\.k_proj", "attn.wk_dv"),
    (r"self_attn\.v_proj", "attn.wv_dv"), (r"self_attn\.r_proj", "attn.wr_du"),
    (r"self_attn\.o_proj", "attn.wo_ud"),
    (r"self_attn\.(k|v)_sconv\.conv1d", r"attn.\1_sconv"), (r"self_attn\.", "attn."),
    (r"(attn|mlp)_sconv\.conv1d", r"\1_sconv"),
    (r"input_layernorm", "attn_norm"), (r"post_attention_layernorm", "mlp_norm"),
    (r"mlp\.gate\.e_score_correction_bias", "mlp.gate.bias"),
    (r"mlp\.experts\.down_proj", "mlp.experts.w2_weight"),
    (r"mlp\.shared_experts\.down_proj", "mlp.shared_experts.shared_w2_weight"),
    (r"mlp\.down_proj\.weight", "mlp.w2_md.weight"),
]


def native_state(model) -> dict[str, torch.Tensor]:
    """transformers' state dict under native names (no ``model.llm.`` prefix), w13 interleaved."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {}
    for k in list(sd):
        if k.endswith("mlp.experts.gate_up_proj"):  # [E, 2I, H] concatenated -> interleaved
            g, u = sd.pop(k).chunk(2, dim=1)
            out[k.replace("gate_up_proj", "w13_weight")] = interleave(g, u, 1)
        elif k.endswith("mlp.shared_experts.gate_proj"):
            u = sd.pop(k.replace("gate_proj", "up_proj"))
            out[k.replace("gate_proj", "shared_w13_weight")] = interleave(sd.pop(k), u, 1)
        elif k.endswith("mlp.gate_proj.weight"):
            u = sd.pop(k.replace("gate_proj", "up_proj"))
            out[k.replace("gate_proj.weight", "w13_dn.weight")] = interleave(sd.pop(k), u, 0)
    out.update(sd)
    renamed = {}
    for k, v in out.items():
        for pat, rep in _RENAMES:
            k = re.sub(pat, rep, k)
        renamed[k] = v
    return renamed

"""transformers' Inkling loaded from native checkpoints (the reference for parity)."""
import pytest
import torch

from inkling_model import nvfp4
from inkling_model.checkpoint import shards, synthetic
from inkling_model.checkpoint.hf_reference import load_hf_model, to_hf_state_dict
from inkling_model.checkpoint.layout import PREFIX
from inkling_model.config import InklingConfig

TINY = InklingConfig.preset("tiny")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return (synthetic.write_random_checkpoint(TINY, root / "bf16"),
            synthetic.write_random_checkpoint(TINY, root / "q", quant="nvfp4"))


def _ids():
    return torch.randint(0, TINY.vocab_size, (1, 30), generator=torch.Generator().manual_seed(3))


def test_logits_finite_and_deterministic(dirs):
    bf16, _ = dirs
    with torch.no_grad():
        a = load_hf_model(bf16)(_ids()).logits
        b = load_hf_model(bf16)(_ids()).logits
    assert a.shape == (1, 30, TINY.vocab_size)
    assert torch.isfinite(a).all() and torch.equal(a, b)
    assert 0.1 < a.std() < 10  # not degenerate


def test_params_equal_checkpoint_after_known_renames(dirs):
    bf16, _ = dirs
    t = shards.read_tensors(bf16)
    p = {n: v.detach() for n, v in load_hf_model(bf16).state_dict().items()}
    f = lambda name: t[PREFIX + name].float()  # noqa: E731
    assert torch.equal(p["model.embed_tokens.weight"], f("embed.weight"))
    assert torch.equal(p["model.embed_tokens.embed_norm.weight"], f("embed_norm.weight"))
    assert torch.equal(p["lm_head.weight"], f("unembed.weight"))
    assert torch.equal(p["model.layers.0.self_attn.q_proj.weight"], f("layers.0.attn.wq_du.weight"))
    assert torch.equal(p["model.layers.0.self_attn.k_sconv.conv1d.weight"], f("layers.0.attn.k_sconv.weight"))
    assert torch.equal(p["model.layers.1.post_attention_layernorm.weight"], f("layers.1.mlp_norm.weight"))
    w13 = f("layers.1.mlp.w13_dn.weight")  # interleaved: gate even rows, up odd rows
    assert torch.equal(p["model.layers.1.mlp.gate_proj.weight"], w13[0::2])
    assert torch.equal(p["model.layers.1.mlp.up_proj.weight"], w13[1::2])
    e13 = f("layers.2.mlp.experts.w13_weight")  # HF's gate_up_proj is [gate; up]
    assert torch.equal(p["model.layers.2.mlp.experts.gate_up_proj"], torch.cat([e13[:, 0::2], e13[:, 1::2]], 1))
    s13 = f("layers.2.mlp.shared_experts.shared_w13_weight")
    assert torch.equal(p["model.layers.2.mlp.shared_experts.gate_proj"], s13[:, 0::2])
    assert torch.equal(p["model.layers.2.mlp.shared_experts.up_proj"], s13[:, 1::2])
    assert torch.equal(p["model.layers.2.mlp.gate.e_score_correction_bias"], f("layers.2.mlp.gate.bias"))
    assert len(p) == len(to_hf_state_dict(t)) == len(t) + 2 + 4  # 2 dense and 4 shared w13 split in two


def test_nvfp4_experts_are_dequantized(dirs):
    _, q = dirs
    t = shards.read_tensors(q)
    p = load_hf_model(q).state_dict()
    stem = PREFIX + "layers.3.mlp.experts.w13_weight"
    deq = nvfp4.dequantize(t[stem], t[stem + "_scale"], t[stem + "_scale2"].view(-1, 1, 1))
    assert torch.equal(p["model.layers.3.mlp.experts.gate_up_proj"], torch.cat([deq[:, 0::2], deq[:, 1::2]], 1))
    with torch.no_grad():
        assert torch.isfinite(load_hf_model(q)(_ids()).logits).all()


def test_bf16_keeps_fp32_modules(dirs):
    bf16, _ = dirs
    model = load_hf_model(bf16, dtype=torch.bfloat16)
    assert model.model.layers[0].attn_sconv.conv1d.weight.dtype == torch.float32
    assert model.model.layers[2].mlp.gate.e_score_correction_bias.dtype == torch.float32
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    with torch.no_grad():
        assert torch.isfinite(model(_ids()).logits).all()

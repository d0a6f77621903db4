"""The native layout against transformers' Inkling and inkling_model's parameters."""
import pytest
import torch

from inkling_model.checkpoint.layout import PREFIX, native_shapes, numel
from inkling_model.config import InklingConfig


def _model_params(config):
    from inkling_model.model import InklingForCausalLM

    with torch.device("meta"):
        model = InklingForCausalLM(config)
    return {n: (tuple(p.shape), p.dtype) for n, p in model.named_parameters()}


def _native_names_as_modules(layout):
    out = {}
    for name, (shape, dtype) in layout.items():
        key = name[len(PREFIX):].replace("_input_amax", "_input_scale")
        out[key] = (tuple(shape), dtype)
    return out


def test_tiny_names_and_counts():
    layout = native_shapes(InklingConfig.preset("tiny"))
    assert all(n.startswith(PREFIX) for n in layout)
    assert layout[PREFIX + "layers.0.mlp.w13_dn.weight"][0] == (512, 128)  # interleaved [2I, H]
    assert layout[PREFIX + "layers.2.mlp.experts.w13_weight"] == ((8, 128, 128), torch.bfloat16)
    assert layout[PREFIX + "layers.2.mlp.gate.bias"] == ((8,), torch.float32)
    assert layout[PREFIX + "layers.5.attn.rel_logits_proj.proj"][0] == (4, 16)  # full layer: rel_extent
    assert layout[PREFIX + "layers.0.attn.rel_logits_proj.proj"][0] == (4, 8)  # sliding: window
    assert layout[PREFIX + "layers.0.attn.k_sconv.weight"][0] == (128, 1, 4)


def test_nvfp4_sidecars_only_from_quant_first_layer():
    layout = native_shapes(InklingConfig.preset("tiny", quant_method="nvfp4"))
    stem = PREFIX + "layers.3.mlp.experts."
    assert layout[stem + "w13_weight"] == ((8, 128, 64), torch.uint8)
    assert layout[stem + "w13_weight_scale"] == ((8, 128, 8), torch.float8_e4m3fn)
    assert layout[stem + "w13_weight_scale2"] == ((8,), torch.float32)
    assert layout[stem + "w13_input_amax"] == ((8,), torch.float32)
    assert layout[stem + "w2_weight"] == ((8, 128, 32), torch.uint8)
    assert layout[stem + "w2_weight_scale"] == ((8, 128, 4), torch.float8_e4m3fn)
    assert layout[PREFIX + "layers.2.mlp.experts.w13_weight"] == ((8, 128, 128), torch.bfloat16)
    assert PREFIX + "layers.2.mlp.experts.w13_input_amax" not in layout


@pytest.mark.parametrize("quant", [None, "nvfp4"])
def test_tiny_layout_equals_model_parameters(quant):
    config = InklingConfig.preset("tiny", quant_method=quant)
    params = _model_params(config)
    native = _native_names_as_modules(native_shapes(config))
    assert set(params) == set(native)
    for name, (shape, _) in native.items():
        assert params[name][0] == shape, name


def test_full_on_meta_matches_layout():
    config = InklingConfig.preset("full", quant_method="nvfp4")
    params = _model_params(config)
    native = _native_names_as_modules(native_shapes(config))
    assert set(params) == set(native)
    assert all(params[n][0] == native[n][0] for n in native)
    bf16 = native_shapes(InklingConfig.preset("full"))
    total = numel(bf16)
    print(f"full preset: {len(bf16)} tensors, {total:,} parameters")
    routed = 64 * 256 * 3 * 3072 * 6144  # MoE layers 2-65, 256 experts, w13 + w2
    assert routed < total < 1.03 * routed  # ~947 G parameters, 98% of them routed experts

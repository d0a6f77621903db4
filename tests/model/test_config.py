"""InklingConfig: presets, derived sizes, config.json round trip, transformers reads what we write."""

import json

import pytest

from inkling_model.config import InklingConfig


@pytest.mark.parametrize("name", ["tiny", "small", "full"])
def test_save_roundtrip_and_transformers_reads_it(tmp_path, name):
    from transformers.models.inkling import InklingTextConfig

    cfg = InklingConfig.preset(name, quant_method="nvfp4")
    cfg.save(tmp_path)
    assert InklingConfig.from_pretrained(tmp_path) == cfg
    hf = InklingTextConfig.from_pretrained(tmp_path)
    for key in ("layer_types", "mlp_layer_types", "hidden_size", "intermediate_size", "moe_intermediate_size",
                "n_routed_experts", "num_experts_per_tok", "conv_kernel_size", "sliding_window_size",
                "rel_extent", "log_scaling_n_floor", "eos_token_id", "unpadded_vocab_size"):
        assert getattr(hf, key) == getattr(cfg, key), key


def test_tiny_layout():
    cfg = InklingConfig.preset("tiny")
    assert cfg.layer_types[5] == "hybrid" and all(t == "hybrid_sliding" for t in cfg.layer_types[:5])
    assert cfg.mlp_layer_types == ["dense", "dense", "sparse", "sparse", "sparse", "sparse"]
    assert cfg.n_routed_experts == 8 and cfg.n_shared_experts == 2 and cfg.hidden_size == 128


def test_expert_quant():
    cfg = InklingConfig.preset("tiny", quant_method="nvfp4")
    assert [cfg.expert_quant(i) for i in range(6)] == [None, None, None, "nvfp4", "nvfp4", "nvfp4"]
    assert all(InklingConfig.preset("tiny").expert_quant(i) is None for i in range(6))
    with pytest.raises(ValueError, match="quant_method"):
        InklingConfig.preset("tiny", quant_method="int4")


def test_checkpoint_spellings(tmp_path):
    """A multimodal config.json with transformers' checkpoint-only keys reads as the same model."""
    text = {"num_hidden_layers": 4, "hidden_size": 64, "dense_mlp_idx": 1, "intermediate_size": 32,
            "dense_intermediate_size": 96, "sconv_kernel_size": 3, "sliding_window": 5, "some_new_key": 7}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "inkling_mm_model", "text_config": text,
                                                      "eos_token_id": [9, 10]}))
    cfg = InklingConfig.from_pretrained(tmp_path)
    assert cfg.mlp_layer_types == ["dense", "sparse", "sparse", "sparse"]
    assert (cfg.moe_intermediate_size, cfg.intermediate_size) == (32, 96)
    assert (cfg.conv_kernel_size, cfg.sliding_window_size, cfg.eos_token_id) == (3, 5, [9, 10])
    assert cfg.extra == {"some_new_key": 7} and cfg.to_dict()["some_new_key"] == 7


def test_unknown_preset():
    with pytest.raises(ValueError, match="tiny"):
        InklingConfig.preset("huge")

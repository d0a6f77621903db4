"""The planted-fault registry: off by default, switched by env or context, unknown names refused."""

import pytest

from inkling_model.switches import faults
from inkling_model.config import InklingConfig


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.active() == frozenset()
    assert not any(faults.is_active(n) for n in faults.FAULTS)


def test_env_and_context(monkeypatch):
    monkeypatch.setenv(faults.ENV, "raw_input_amax, gate_up_layout")
    assert faults.is_active("raw_input_amax") and faults.is_active("gate_up_layout")
    assert not faults.is_active("renorm_rows")
    with faults.activate("renorm_rows"):
        assert faults.is_active("renorm_rows")
    assert not faults.is_active("renorm_rows")


def test_unknown_names(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown fault 'nope' \(known: raw_input_amax, gate_up_layout, renorm_rows, "
                       r"capture_unsafe_allreduce, adp_global_tp_size, adp_dense_allreduce, no_config_eos, "
                       r"renorm_fused_rows, vision_fold_order, audio_codebook_offsets, fake_kernel_dtype, "
                       r"compiled_branch, fusion_rounding\)"):
        faults.is_active("nope")
    with pytest.raises(ValueError, match="unknown fault 'typo'"):
        with faults.activate("renorm_rows,typo"):
            pass
    monkeypatch.setenv(faults.ENV, "bogus")
    with pytest.raises(ValueError, match="bogus"):
        faults.active()


def test_locations():
    cfg = InklingConfig.preset("tiny", quant_method="nvfp4")
    assert faults.location("raw_input_amax", cfg) == "layers.3.mlp.experts"
    assert faults.location("gate_up_layout", cfg) == "layers.2.mlp.experts"
    assert faults.location("renorm_rows", cfg) == "layers.1.attn_norm"
    assert faults.location("raw_input_amax", InklingConfig.preset("tiny", quant_first_layer=4)) == "layers.4.mlp.experts"
    assert faults.location("adp_global_tp_size", cfg) == "layers.0.attn.out"
    assert faults.location("adp_dense_allreduce", cfg) == "layers.0.mlp.out"
    assert faults.location("no_config_eos", cfg) == "generate.resolve_eos"
    assert all(f.doc and f.carrier for f in faults.FAULTS.values())

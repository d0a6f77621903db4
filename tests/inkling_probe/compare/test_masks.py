"""Attention masks are compared by meaning (compare/masks.py): SDPA's boolean mask and eager's additive
float mask of the same positions agree exactly; a mask that masks other positions is a divergence that
says where; a fault behind an equal mask is named at its own key, not at the mask."""
import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.compare import compare, masks
from inkling_probe.compare.values import Values

from dumps import write

T = 6
CAUSAL = np.tril(np.ones((T, T), dtype=bool))  # [T, S] True = attend
MIN32 = float(np.finfo(np.float32).min)


def _additive(attend: np.ndarray, masked_value: float = MIN32) -> np.ndarray:
    return np.where(attend, 0.0, masked_value).astype(np.float32)


# -- the canonical form ------------------------------------------------------------------------------
@pytest.mark.parametrize("a,b", [
    (CAUSAL[None, None], _additive(CAUSAL)[None, None]),  # SDPA bool vs eager finfo.min
    (_additive(CAUSAL, -np.inf), _additive(CAUSAL)),  # -inf vs finfo.min
    (CAUSAL, _additive(CAUSAL)[None, None].repeat(4, axis=1)),  # [T,S] vs [B,H,T,S]
    (~CAUSAL[None, None], _additive(CAUSAL, -1e9)[None]),  # True = masked (read from the diagonal)
    (_additive(CAUSAL, -65504.0).astype(np.float16), CAUSAL[None, None]),  # fp16's finfo.min
])
def test_equal_meaning_is_exact(a, b):
    r = masks.compare_masks(Values(a, a.dtype.name), Values(b, b.dtype.name))
    assert r is not None and r.differ == 0, r


def test_a_mask_masking_other_positions_says_where():
    other = CAUSAL.copy()
    other[4, 1] = False  # one more position masked
    r = masks.compare_masks(Values(CAUSAL[None, None], "bool"), Values(_additive(other)[None, None], "float32"))
    assert r.differ == 1 and r.first == [0, 0, 4, 1]
    assert "mask differs at 1 of 36 positions" in r.note and "[0, 0, 4, 1]" in r.note


def test_values_that_are_no_mask_are_not_read_as_one():
    bias = np.linspace(-3, 0, T * T, dtype=np.float32).reshape(T, T)  # a soft bias (ALiBi-like)
    assert masks.compare_masks(Values(CAUSAL, "bool"), Values(bias, "float32")) is None
    assert masks.read(Values(np.array([0.0, 0.5], dtype=np.float32), "float32")) is None


# -- through record() and compare: transformers' Llama, eager against SDPA ------------------------------
def _llama(impl: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = impl
    return LlamaForCausalLM(cfg).eval()


def _record(path, impl: str, scale: float = 1.0) -> str:
    torch.set_num_threads(1)
    model = _llama(impl)
    if scale != 1.0:  # a fault behind the mask: layer 0's attention output scaled
        model.model.layers[0].self_attn.o_proj.register_forward_pre_hook(lambda m, a: (a[0] * scale,))
    ids = torch.tensor([[3, 5, 7, 9, 11, 13]])
    pad = torch.ones_like(ids)
    pad[:, -1] = 0  # a padded last token: SDPA gets a bool mask (no mask at all without padding)
    with torch.no_grad(), inkling_probe.record(model, str(path), writer="inline"):
        model(input_ids=ids, attention_mask=pad)
    return str(path)


MASK_KEY = "model.layers.0.self_attn.in.attention_mask"


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("eager") / "d", "eager")


def test_sdpa_bool_mask_against_eager_float_mask_is_benign(eager, tmp_path):
    sdpa = _record(tmp_path / "sdpa", "sdpa")
    rep = compare(eager, sdpa, explain=False)
    row = rep.row(MASK_KEY)
    assert (row.ref_dtype, row.cand_dtype) == ("float32", "bool")
    assert row.status == "exact", (row.status, row.note)
    assert not rep.diverged and not rep.unchecked, [(r.key, r.status) for r in rep.rows if r.diverged][:4]


def test_a_fault_behind_the_mask_is_named_not_the_mask(eager, tmp_path):
    sdpa = _record(tmp_path / "sdpa", "sdpa", scale=1.01)
    rep = compare(eager, sdpa, explain=False)
    assert rep.diverged
    assert rep.culprit.key == "model.layers.0.self_attn.o_proj.in.0", [c.key for c in rep.culprits]
    assert not any("mask" in r.key for r in rep.rows if r.diverged)


def test_a_different_mask_is_the_culprit_with_its_positions(tmp_path):
    attend = np.tril(np.ones((T, T), dtype=bool))
    other = attend.copy()
    other[3, 0] = False
    x = torch.randn(1, T, 8)
    a = write(tmp_path / "ref", [[("attn.in.attention_mask", torch.tensor(_additive(attend))[None, None]), ("attn", x)]])
    b = write(tmp_path / "cand", [[("attn.in.attention_mask", torch.tensor(other)[None, None]), ("attn", x)]])
    rep = compare(a, b, explain=False)
    assert rep.diverged and rep.culprit.key == "attn.in.attention_mask"
    assert "mask differs at 1 of 36 positions" in rep.row("attn.in.attention_mask").note

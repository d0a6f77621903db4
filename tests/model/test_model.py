"""The top model: decode with the cache equals the full forward; `full` on the meta device vs the layout."""

import pytest
import torch

from inkling_model.config import InklingConfig
from inkling_model.layers.context import StepContext
from inkling_model.model import InklingForCausalLM

from hf_util import hf_model, native_state
from parity_util import rel_rms


@pytest.fixture(scope="module")
def tiny():
    cfg = InklingConfig.preset("tiny")
    model = InklingForCausalLM(cfg)
    model.load_weights(native_state(hf_model(cfg, seed=5)).items())
    return cfg, model


def test_decode_with_cache_equals_full_forward(tiny):
    """Prefill 5 tokens, then decode one at a time past the window (8) and rel_extent (16)."""
    cfg, model = tiny
    ids = torch.randint(0, cfg.vocab_size, (22,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids)  # [22, V]
        cache = model.new_cache()
        steps = [model(ids[:5], StepContext([5], [cache]))]
        for t in range(5, 22):
            steps.append(model(ids[t:t + 1], StepContext([1], [cache])))
    assert cache.length == 22
    assert rel_rms(torch.cat(steps), full) <= 1e-5


def test_batched_decode_two_requests(tiny):
    """Two requests of different lengths decoded together equal each decoded alone (last_only logits)."""
    cfg, model = tiny
    a, b = torch.arange(3, 15), torch.arange(100, 104)
    with torch.no_grad():
        ref_a, ref_b = model(a)[-1], model(b)[-1]
        ca, cb = model.new_cache(), model.new_cache()
        model(torch.cat([a[:-1], b[:-1]]), StepContext([11, 3], [ca, cb]))
        last = model(torch.stack([a[-1], b[-1]]), StepContext([1, 1], [ca, cb]), last_only=True)  # [2, V]
    assert rel_rms(last[0], ref_a) <= 1e-5 and rel_rms(last[1], ref_b) <= 1e-5


def test_bf16_model_keeps_fp32_where_transformers_does():
    with torch.device("meta"):
        model = InklingForCausalLM(InklingConfig.preset("tiny"), dtype=torch.bfloat16)
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    fp32 = sorted(n for n, d in dtypes.items() if d == torch.float32)
    assert all(n.endswith(("sconv.weight", "mlp.gate.bias", "mlp.gate.global_scale")) for n in fp32)
    assert dtypes["layers.2.attn.k_sconv.weight"] == torch.float32
    assert dtypes["layers.2.mlp.gate.weight"] == dtypes["layers.2.mlp.experts.w13_weight"] == torch.bfloat16


@pytest.mark.parametrize("quant", [None, "nvfp4"])
def test_full_on_meta_matches_checkpoint_layout(quant):
    from inkling_model.checkpoint.layout import PREFIX, native_shapes

    cfg = InklingConfig.preset("full", quant_method=quant)
    with torch.device("meta"):
        model = InklingForCausalLM(cfg, dtype=torch.bfloat16)
    ours = {n: tuple(p.shape) for n, p in model.named_parameters()}
    layout = {n[len(PREFIX):].replace("_input_amax", "_input_scale"): tuple(shape)
              for n, (shape, _) in native_shapes(cfg, quant=quant).items()}
    assert ours == layout
    total = sum(p.numel() for p in model.parameters())
    print(f"\nfull ({quant or 'bf16'}): {len(ours)} tensors, {total:,} parameters "
          f"({total / 1e9:.1f} B; packed fp4 bytes count once)")
    if quant is None:
        assert total == 947_025_564_226

"""NvFp4RoutedExperts: forward against a hand-written emulation, and its scales as probes."""
import pytest
import torch
import torch.nn.functional as F

import inkling_probe
from inkling_model import nvfp4
from inkling_model.checkpoint import shards, synthetic, weights
from inkling_model.config import InklingConfig
from inkling_model.layers.experts_nvfp4 import NvFp4RoutedExperts
from inkling_model.switches import faults

QTINY = InklingConfig.preset("tiny", quant_method="nvfp4")
STEM = "layers.3.mlp.experts."


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    d = synthetic.write_random_checkpoint(QTINY, tmp_path_factory.mktemp("e") / "q", quant="nvfp4")
    return shards.read_tensors(d)


def _loaded(q):
    mod = NvFp4RoutedExperts(QTINY, 3)
    weights.load_tensors(mod, q, config=QTINY, module_prefix=STEM)
    return mod


def test_forward_equals_direct_emulation(q):
    mod = _loaded(q)
    torch.manual_seed(0)
    x = torch.randn(6, QTINY.hidden_size)
    idx = torch.tensor([[0, 7], [3, 1], [7, 2], [5, 0], [1, 4], [6, 3]])
    w = torch.rand(6, 2)
    t = {k[len("model.llm." + STEM):]: v for k, v in q.items() if k.startswith("model.llm." + STEM)}
    ref = torch.zeros(6, QTINY.hidden_size)
    for row in range(6):
        for slot in range(2):
            e = idx[row, slot].item()
            w13 = nvfp4.dequantize(t["w13_weight"][e], t["w13_weight_scale"][e], t["w13_weight_scale2"][e])
            w2 = nvfp4.dequantize(t["w2_weight"][e], t["w2_weight_scale"][e], t["w2_weight_scale2"][e])
            a = nvfp4.fake_quant(x[row:row + 1], t["w13_input_amax"][e] / 2688)
            y = a @ w13.t()
            h = nvfp4.fake_quant(F.silu(y[:, 0::2]) * y[:, 1::2], t["w2_input_amax"][e] / 2688)
            ref[row] += w[row, slot] * (h @ w2.t())[0]
    assert torch.allclose(mod(x, idx, w), ref, rtol=1e-5, atol=1e-6)


def test_bf16_input_gives_bf16_output(q):
    mod = _loaded(q)
    x = torch.randn(4, QTINY.hidden_size).bfloat16()
    out = mod(x, torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 2).bfloat16())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_scales_are_probed(q, tmp_path):
    mod = _loaded(q)
    x = torch.randn(3, QTINY.hidden_size)
    idx, w = torch.tensor([[0, 1], [2, 3], [4, 5]]), torch.ones(3, 2)
    with inkling_probe.recording(tmp_path / "good"):
        inkling_probe.step()
        mod(x, idx, w)
    with faults.activate("raw_input_amax"):
        weights.load_tensors(mod, q, config=QTINY, module_prefix=STEM)
    with inkling_probe.recording(tmp_path / "raw"):
        inkling_probe.step()
        mod(x, idx, w)
    good, raw = inkling_probe.open(tmp_path / "good"), inkling_probe.open(tmp_path / "raw")
    key = STEM + "input_scale"
    assert {key, STEM + "w2_input_scale", STEM + "w13_weight_scale2", STEM + "w2_weight_scale2"} <= set(good.keys())
    amax = q["model.llm." + STEM + "w13_input_amax"]
    assert torch.equal(torch.as_tensor(good.tensor(key)), amax / 2688)
    assert torch.allclose(torch.as_tensor(raw.tensor(key)) / torch.as_tensor(good.tensor(key)),
                          torch.full((8,), 2688.0))


def test_rejects_intermediate_shards_that_split_blocks():
    from inkling_model.parallel import Group, Parallel

    tp = Parallel(world=Group(0, 8, None), attn=Group(), dp_peers=Group())  # I = 64 -> 8 per rank
    with pytest.raises(ValueError, match="multiples of 16"):
        NvFp4RoutedExperts(QTINY, 3, tp)

"""Random native checkpoints: files, determinism, NVFP4 from exactly the bf16 tensors, calibration."""
import json

import pytest
import torch

from inkling_model import nvfp4
from inkling_model.checkpoint import calibration, massive, shards, synthetic, weights
from inkling_model.checkpoint.layout import PREFIX, native_shapes
from inkling_model.config import InklingConfig
from inkling_model.switches import faults

TINY = InklingConfig.preset("tiny")
QTINY = InklingConfig.preset("tiny", quant_method="nvfp4")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    bf16 = synthetic.write_random_checkpoint(TINY, root / "bf16", seed=0, max_shard_bytes=300_000)
    q = synthetic.write_random_checkpoint(TINY, root / "nvfp4", seed=0, quant="nvfp4")
    return bf16, q


def test_files_index_and_config(ckpts):
    bf16, q = ckpts
    index = json.loads((bf16 / shards.INDEX_NAME).read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and all((bf16 / f).exists() for f in files)
    assert set(index["weight_map"]) == set(native_shapes(TINY))
    assert InklingConfig.from_pretrained(bf16) == TINY
    assert InklingConfig.from_pretrained(q) == QTINY
    gen = json.loads((q / "generation_config.json").read_text())
    assert gen["eos_token_id"] == TINY.eos_token_id and gen["bos_token_id"] == TINY.bos_token_id


def test_round_trip_bit_exact(ckpts):
    bf16, _ = ckpts
    written = shards.read_tensors(bf16)
    again = synthetic.random_tensors(TINY, seed=0)
    assert set(written) == set(again)
    for name, t in again.items():
        assert written[name].dtype == t.dtype and torch.equal(written[name], t), name


def test_seed_changes_weights_and_is_deterministic():
    a, b = synthetic.random_tensors(TINY, 0), synthetic.random_tensors(TINY, 1)
    name = PREFIX + "layers.3.mlp.experts.w13_weight"
    assert not torch.equal(a[name], b[name])
    assert torch.equal(a[name], synthetic.random_tensors(TINY, 0)[name])


def test_refuses_nonempty_dir(tmp_path):
    (tmp_path / "x").write_text("keep me")
    with pytest.raises(shards.CheckpointExistsError):
        synthetic.write_random_checkpoint(TINY, tmp_path)
    assert (tmp_path / "x").read_text() == "keep me"


def test_activations_finite_and_massive_channel_planted():
    t = synthetic.random_tensors(TINY, 0)
    ids = torch.tensor([[TINY.bos_token_id] + list(range(3, 40))])
    xs = calibration.moe_inputs(TINY, t, ids, [3])
    x = xs[3]  # [T, H]
    c = massive.MASSIVE_CHANNEL
    ordinary = x[1:]
    assert torch.isfinite(x).all()
    assert 0.5 < ordinary.pow(2).mean().sqrt() < 2.0
    assert torch.count_nonzero(ordinary[:, c]) == 0  # ordinary tokens never carry the channel
    assert x[0, c].abs() > 100 * ordinary.pow(2).mean().sqrt()  # BOS: hundreds of times typical


def test_nvfp4_checkpoint_is_quantized_from_the_bf16_one(ckpts):
    bf16_dir, q_dir = ckpts
    bf16, q = shards.read_tensors(bf16_dir), shards.read_tensors(q_dir)
    shards.check_layout(q, native_shapes(QTINY))
    quantized = calibration.quantized_layers(QTINY)
    assert quantized == [3, 4, 5]
    for name, t in q.items():  # everything outside the quantized experts is the bf16 tensor itself
        if not any(name.startswith(f"{PREFIX}layers.{i}.mlp.experts.") for i in quantized):
            assert torch.equal(t, bf16[name]), name
    for i in quantized:
        for proj in ("w13", "w2"):
            stem = f"{PREFIX}layers.{i}.mlp.experts.{proj}"
            w = bf16[stem + "_weight"]  # [E, rows, cols]
            for e in (0, w.shape[0] - 1):
                packed, scale, scale2 = nvfp4.quantize(w[e].float())
                assert torch.equal(q[stem + "_weight"][e], packed)
                assert torch.equal(q[stem + "_weight_scale"][e].view(torch.uint8), scale.view(torch.uint8))
                assert q[stem + "_weight_scale2"][e] == scale2
            deq = nvfp4.dequantize(q[stem + "_weight"], q[stem + "_weight_scale"],
                                   q[stem + "_weight_scale2"].view(-1, 1, 1))
            rel = ((deq - w.float()).norm() / w.float().norm()).item()
            assert 0.05 < rel < 0.15, (stem, rel)


def test_calibrated_amax_reflects_the_massive_token(ckpts):
    _, q_dir = ckpts
    q = shards.read_tensors(q_dir)
    ids = calibration.calibration_tokens(TINY, seed=0)
    assert (ids[:, 0] == TINY.bos_token_id).all()
    for i in (3, 4, 5):
        a13 = q[f"{PREFIX}layers.{i}.mlp.experts.w13_input_amax"]
        a2 = q[f"{PREFIX}layers.{i}.mlp.experts.w2_input_amax"]
        assert a13.shape == (8,) and bool((a13 == a13[0]).all())  # every expert saw every token
        assert a13[0] > 200 and bool((a2 > 0).all()) and len(set(a2.tolist())) > 1


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_first_nvfp4_layer_error_correct_vs_raw_amax(ckpts):
    """The must-show: routed-expert output of layer 3, NVFP4 vs bf16, with the right and the raw scale."""
    from inkling_model.checkpoint.hf_reference import hf_model_from_tensors
    from inkling_model.layers.experts_nvfp4 import NvFp4RoutedExperts

    bf16_dir, q_dir = ckpts
    bf16, q = shards.read_tensors(bf16_dir), shards.read_tensors(q_dir)
    layer = 3
    ids = torch.randint(2, TINY.vocab_size, (1, 64), generator=torch.Generator().manual_seed(123))
    x = calibration.moe_inputs(TINY, bf16, ids, [layer])[layer]  # [T, H] ordinary tokens
    truth = hf_model_from_tensors(TINY, bf16).model.layers[layer].mlp
    deq = hf_model_from_tensors(QTINY, q).model.layers[layer].mlp  # dequantized weights, no act quant
    with torch.no_grad():
        _, topk_w, topk_idx, _ = truth.gate(x)
        ref, ref_deq = truth.experts(x, topk_idx, topk_w), deq.experts(x, topk_idx, topk_w)
    got = {}
    for fault in (None, "raw_input_amax"):
        mod = NvFp4RoutedExperts(QTINY, layer)
        with faults.activate([fault] if fault else []):
            weights.load_tensors(mod, q, config=QTINY, module_prefix=f"layers.{layer}.mlp.experts.")
        with torch.no_grad():
            out = mod(x, topk_idx, topk_w)
        got[fault] = (_rel(out, ref), _rel(out, ref_deq))
    (ok_bf16, ok_deq), (raw_bf16, raw_deq) = got[None], got["raw_input_amax"]
    print(f"\nlayer {layer} routed experts rel_rms vs bf16: correct {ok_bf16:.3f}, raw_input_amax {raw_bf16:.3f}; "
          f"vs dequantized weights: correct {ok_deq:.3f}, raw_input_amax {raw_deq:.3f}")
    assert ok_bf16 < 0.3 and ok_deq < 0.22
    assert raw_bf16 > 0.5 and raw_bf16 > 2.5 * ok_bf16 and raw_deq > 3.5 * ok_deq

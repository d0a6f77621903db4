"""The weight mapper: conversions, planted faults, TP shards, and one-line errors."""
import pytest
import torch

from inkling_model.checkpoint import shards, synthetic, weights
from inkling_model.checkpoint.layout import PREFIX
from inkling_model.checkpoint.shards import CheckpointError
from inkling_model.config import InklingConfig
from inkling_model.layers.experts_nvfp4 import NvFp4RoutedExperts
from inkling_model.model import InklingForCausalLM
from inkling_model.nvfp4 import SCALE_DENOM
from inkling_model.parallel import Group, Parallel
from inkling_model.switches import faults

TINY = InklingConfig.preset("tiny")
QTINY = InklingConfig.preset("tiny", quant_method="nvfp4")


@pytest.fixture(scope="module")
def bf16():
    return synthetic.random_tensors(TINY, seed=0)


@pytest.fixture(scope="module")
def qdir(tmp_path_factory):
    return synthetic.write_random_checkpoint(TINY, tmp_path_factory.mktemp("w") / "q", quant="nvfp4")


@pytest.fixture(scope="module")
def q(qdir):
    return shards.read_tensors(qdir)


def _fake_tp(rank: int, size: int) -> Parallel:
    g = Group(rank, size, None)  # shapes and loaders only: no collective runs in these tests
    return Parallel(world=g, attn=g, dp_peers=Group())


def test_concat_to_interleaved_known_answer():
    rows = torch.tensor([[10], [11], [20], [21]])  # [g0, g1, u0, u1]
    assert weights.concat_to_interleaved(rows, dim=0).flatten().tolist() == [10, 20, 11, 21]


def test_loaded_model_matches_transformers(tmp_path, bf16):
    from inkling_model.checkpoint.hf_reference import hf_model_from_tensors

    ckpt = synthetic.write_random_checkpoint(TINY, tmp_path / "c", max_shard_bytes=300_000)
    model = InklingForCausalLM(InklingConfig.from_pretrained(ckpt))
    report = weights.load_checkpoint(model, ckpt)
    assert report.loaded == len(bf16) and report.faults == []
    ids = torch.randint(0, TINY.vocab_size, (24,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, ref = model(ids), hf_model_from_tensors(TINY, bf16)(ids[None]).logits[0]
    rel = ((ours - ref).norm() / ref.norm()).item()
    print(f"\ntiny fp32 logits rel_rms vs transformers: {rel:.2e}")
    assert rel < 1e-5


def test_input_amax_becomes_input_scale(q):
    amax = q[PREFIX + "layers.3.mlp.experts.w13_input_amax"]
    mod = NvFp4RoutedExperts(QTINY, 3)
    weights.load_tensors(mod, q, config=QTINY, module_prefix="layers.3.mlp.experts.")
    assert torch.equal(mod.w13_input_scale.data, amax / SCALE_DENOM)
    w2 = q[PREFIX + "layers.3.mlp.experts.w2_input_amax"]
    assert torch.equal(mod.w2_input_scale.data, w2 / SCALE_DENOM)
    with faults.activate("raw_input_amax"):
        weights.load_tensors(mod, q, config=QTINY, module_prefix="layers.3.mlp.experts.")
    assert torch.equal(mod.w13_input_scale.data, amax)


def _same(a, b):
    if a.dtype.itemsize == 1:  # fp8 has no equality kernel: compare bytes
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return torch.equal(a, b)


def test_gate_up_layout_fault_reorders_routed_experts_only(qdir, q):
    clean, bad = InklingForCausalLM(QTINY), InklingForCausalLM(QTINY)
    weights.load_checkpoint(clean, qdir)
    with faults.activate("gate_up_layout"):
        assert weights.load_checkpoint(bad, qdir).faults == ["gate_up_layout"]
    cp, bp = dict(clean.named_parameters()), dict(bad.named_parameters())
    changed = sorted(n for n in cp if not _same(cp[n], bp[n]))
    assert changed == [f"layers.{i}.mlp.experts.{n}" for i in (2, 3, 4, 5)
                       for n in (("w13_weight",) if i == 2 else ("w13_weight", "w13_weight_scale"))]
    full = q[PREFIX + "layers.3.mlp.experts.w13_weight"]
    assert torch.equal(bp["layers.3.mlp.experts.w13_weight"].data, weights.concat_to_interleaved(full))


@pytest.mark.parametrize("size", [2, 4])
def test_tp_shards_are_slices_of_the_full_tensors(q, size):
    full13, full2 = q[PREFIX + "layers.3.mlp.experts.w13_weight"], q[PREFIX + "layers.3.mlp.experts.w2_weight"]
    scale2 = q[PREFIX + "layers.3.mlp.experts.w2_weight_scale"]
    for rank in range(size):
        model = InklingForCausalLM(QTINY, tp=_fake_tp(rank, size))
        weights.load_tensors(model, q)
        exp = model.layers[3].mlp.experts
        rows, cols = full13.shape[1] // size, full2.shape[2] // size
        assert torch.equal(exp.w13_weight.data, full13[:, rank * rows:(rank + 1) * rows])
        assert torch.equal(exp.w2_weight.data, full2[:, :, rank * cols:(rank + 1) * cols])
        sc = scale2.shape[2] // size
        assert torch.equal(exp.w2_weight_scale.data.view(torch.uint8),
                           scale2[:, :, rank * sc:(rank + 1) * sc].view(torch.uint8))


@pytest.mark.parametrize("expert_parallel", [False, True])
def test_nvfp4_experts_partial_sums_add_up(q, expert_parallel):
    torch.manual_seed(0)
    x = torch.randn(20, TINY.hidden_size)
    idx = torch.stack([torch.randperm(8)[:2] for _ in range(20)])  # [T, k]
    w = torch.rand(20, 2)
    one = NvFp4RoutedExperts(QTINY, 3)
    weights.load_tensors(one, q, config=QTINY, module_prefix="layers.3.mlp.experts.")
    total = torch.zeros(20, TINY.hidden_size)
    for rank in range(2):
        tp = Parallel(world=Group(rank, 2, None), attn=Group(), dp_peers=Group(), expert_parallel=expert_parallel)
        part = NvFp4RoutedExperts(QTINY, 3, tp)
        weights.load_tensors(part, q, config=QTINY, module_prefix="layers.3.mlp.experts.")
        total += part(x, idx, w)
    ref = one(x, idx, w)
    assert torch.allclose(total, ref, rtol=1e-5, atol=1e-6)


def _model_and_tensors(bf16):
    return InklingForCausalLM(TINY), dict(bf16)


def test_missing_tensor_is_named(bf16):
    model, t = _model_and_tensors(bf16)
    del t[PREFIX + "layers.4.mlp.gate.bias"]
    with pytest.raises(CheckpointError, match=r"lacks model\.llm\.layers\.4\.mlp\.gate\.bias"):
        weights.load_tensors(model, t)


def test_unexpected_tensor_is_named(bf16):
    model, t = _model_and_tensors(bf16)
    t[PREFIX + "layers.4.mlp.bogus"] = torch.zeros(3)
    with pytest.raises(CheckpointError, match=r"<memory>: unexpected tensor model\.llm\.layers\.4\.mlp\.bogus"):
        weights.load_tensors(model, t)


def test_misshaped_tensor_names_file_and_key(tmp_path, bf16):
    from safetensors.torch import save_file

    ckpt = synthetic.write_random_checkpoint(TINY, tmp_path / "c", max_shard_bytes=300_000)
    name = PREFIX + "layers.1.attn.wq_du.weight"
    fname = shards.checkpoint_files(ckpt)[name]
    shard = {n: t for _, n, t in shards.iter_tensors(ckpt) if shards.checkpoint_files(ckpt)[n] == fname}
    shard[name] = shard[name][:-1].contiguous()
    save_file(shard, str(ckpt / fname))
    with pytest.raises(CheckpointError, match=rf"{fname}: model\.llm\.layers\.1\.attn\.wq_du\.weight has shape"):
        weights.load_checkpoint(InklingForCausalLM(TINY), ckpt)


def test_nvfp4_checkpoint_into_bf16_config_is_refused(qdir):
    with pytest.raises(CheckpointError, match="w13_weight"):
        weights.load_checkpoint(InklingForCausalLM(TINY), qdir)


def test_towers_are_skipped_and_counted(bf16):
    model, t = _model_and_tensors(bf16)
    t["model.visual.layers.linear_0.weight"] = torch.zeros(2, 2)
    assert weights.load_tensors(model, t).skipped == 1

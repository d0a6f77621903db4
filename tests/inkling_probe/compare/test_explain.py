"""Explain: planted differences must be named with evidence; benign noise must name nothing.

The new hypotheses (per-row/per-channel ratio, offset, rounding, q/k/v chunk order, flushed) and
the bounds live in tests/inkling_probe/compare/explain/.
"""
import numpy as np
import pytest

from inkling_probe.compare.explain import explain
from inkling_probe.compare.explain.formats import round_to

from .explain import names, only, randn


# --- benign pairs: nothing must hold ------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0])  # under, just over and far over the noise
def test_benign_noise_names_nothing(scale):
    r = randn(64, 128)
    c = r + scale * 0.01 * r.std() * randn(64, 128)
    assert explain(r, c, noise=0.01, token_dim=0, head_dim=16, tp_sizes=(2,)) == []


def test_bf16_rounding_of_fp32_names_nothing_at_the_bf16_noise_level():
    r = randn(32, 256).astype(np.float32)
    c = round_to(r.astype(np.float64), "bfloat16").astype(np.float32)  # bf16 values, stored as fp32
    assert explain(r, c, cand_dtype="bfloat16") == []  # noise defaults to the bf16 threshold
    assert names(explain(r, c)) == ["rounding"]  # at the fp32 level only the rounding holds


def test_a_pair_within_noise_has_nothing_to_explain():
    r = randn(8, 8)
    assert explain(r, r * 2, noise=2.0) == []


# --- constant ratio --------------------------------------------------------------------------------
@pytest.mark.parametrize("ratio,label", [(2688.0, "2688 = 6*448"), (1 / 2688, "1/(2688 = 6*448)"),
                                         (448.0, "448 (fp8 e4m3 max)"), (0.125, "1/2**3"),
                                         (-1.0, "-1 (sign flip)")])
def test_constant_ratio_matched_to_known_constants(ratio, label):
    r = randn(16, 32)
    f = only(explain(r, r * ratio, noise=1e-5), "constant_ratio")
    assert f.evidence["matches"][0] == label and f.kind == "ratio"
    assert f.evidence["ratio"] == pytest.approx(ratio, rel=1e-6)


def test_ratio_sqrt_d_and_tp_size():
    r = randn(8, 64)
    f = only(explain(r, r / 8.0, noise=1e-5, head_dim=64), "constant_ratio")
    assert "1/sqrt(64)" in f.evidence["matches"]
    f = only(explain(r, r * 3.0, noise=1e-5, tp_sizes=(1, 3)), "constant_ratio")
    assert f.evidence["matches"][0] == "tp_size 3"


def test_unknown_ratio_still_holds_but_is_unnamed():
    r = randn(8, 64)
    f = only(explain(r, r * 1.05, noise=1e-5), "constant_ratio")
    assert f.evidence["matches"] == [] and "no known constant" in f.summary


def test_ratio_does_not_hold_with_noise_over_it():
    r = randn(64, 64)
    c = r * 2 + 0.2 * randn(64, 64)
    assert "constant_ratio" not in names(explain(r, c, noise=0.01))


def test_a_constant_ratio_is_not_also_a_per_row_or_per_channel_ratio():
    r = randn(16, 32)
    assert names(explain(r, r * 0.5, noise=0.01, token_dim=0)) == ["constant_ratio"]


def test_wrong_input_scale_is_a_2688_ratio_on_the_scale_and_zeroed_blocks_on_the_output():
    torch = pytest.importorskip("torch")
    from inkling_model import nvfp4

    g = torch.Generator().manual_seed(0)
    t, h, i = 32, 64, 32
    x = torch.randn(t, h, generator=g)  # [T, H] ordinary tokens
    w13, w2 = torch.randn(2 * i, h, generator=g) / 8, torch.randn(h, i, generator=g) / 6

    def expert(x, s1, s2):  # NVFP4 activations into both GEMMs of a SwiGLU expert
        gu = nvfp4.fake_quant(x, s1) @ w13.T  # [T, 2I]
        act = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]  # [T, I]
        return nvfp4.fake_quant(act, s2) @ w2.T, act

    calib = torch.cat([x, 100 * torch.randn(1, h, generator=g)])  # calibration holds one massive token
    _, act_cal = expert(calib, nvfp4.global_scale(calib.abs().max()), torch.tensor(1.0))
    amax1, amax2 = calib.abs().max().float(), act_cal.abs().max().float()
    good, raw = nvfp4.global_scale(amax1), amax1  # the bug: the raw amax used as input_scale
    f = only(explain(good.reshape(1).numpy(), raw.reshape(1).numpy(), noise=1e-5), "constant_ratio")
    assert f.evidence["matches"][0] == "2688 = 6*448"

    ref, _ = expert(x, good, nvfp4.global_scale(amax2))
    cand, _ = expert(x, raw, amax2)
    found = explain(ref.numpy(), cand.numpy(), noise=0.32, token_dim=0)
    assert "constant_ratio" not in names(found)  # flushed blocks are not a ratio
    z = only(found, "zeroed")
    assert z.evidence["error_share"] > 0.5 and z.evidence["blocks_zeroed"] > 0


def test_torch_tensors_are_accepted_by_duck_typing():
    torch = pytest.importorskip("torch")
    r = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    f = only(explain(r, r * 448), "constant_ratio")  # noise from the tensors' dtype (fp32)
    assert f.evidence["matches"][0] == "448 (fp8 e4m3 max)"
    assert explain(r, r.bfloat16()) == []  # the bf16 dtype sets the noise level


# --- layout permutations ---------------------------------------------------------------------------
def test_transpose():
    r = randn(16, 16)
    f = only(explain(r, r.T.copy(), noise=1e-5), "layout_permutation")
    assert f.evidence["permutation"] == "transpose" and f.kind == "permutation"


def test_gate_up_interleaved_vs_concatenated_both_ways():
    inter = randn(2 * 12, 8)  # [g0, u0, g1, u1, ...] rows
    concat = np.concatenate([inter[0::2], inter[1::2]])  # [g; u]
    f = only(explain(inter, concat, noise=1e-5), "layout_permutation")
    assert f.evidence == {**f.evidence, "permutation": "concat_as_interleaved", "dim": 0}
    f = only(explain(concat, inter, noise=1e-5), "layout_permutation")
    assert f.evidence["permutation"] == "interleaved_as_concat" and f.evidence["dim"] == 0


def test_swapped_halves_along_the_right_dim():
    r = randn(6, 10)
    c = np.concatenate([r[:, 5:], r[:, :5]], axis=1)
    f = only(explain(r, c, noise=1e-5), "layout_permutation")
    assert (f.evidence["permutation"], f.evidence["dim"]) == ("swapped_halves", 1)


def test_shard_order_for_tp4():
    r = randn(8, 32)
    parts = np.split(r, 4, axis=1)
    c = np.concatenate([parts[i] for i in (1, 0, 3, 2)], axis=1)
    f = only(explain(r, c, noise=1e-5, tp_sizes=(4,)), "layout_permutation")
    assert f.evidence["permutation"] == "shard_order" and f.evidence["order"] == [1, 0, 3, 2]


def test_fp4_nibble_order():
    from inkling_probe.compare.explain import unpack_fp4

    packed = np.random.default_rng(3).integers(0, 256, (16, 8), dtype=np.uint8)
    swapped = (packed >> 4) | ((packed & 0xF) << 4)
    found = explain(unpack_fp4(packed), unpack_fp4(swapped), noise=1e-5,
                    ref_dtype="float4_e2m1fn_x2", cand_dtype="float4_e2m1fn_x2")
    assert only(found, "layout_permutation").evidence["permutation"] == "fp4_nibble_order"


# --- confinement ------------------------------------------------------------------------------------
def test_divergence_confined_to_exact_token_rows():
    r = randn(16, 64)
    c = r + 1e-4 * randn(16, 64)
    c[[2, 5]] = c[[2, 5]] * 1.3
    f = only(explain(r, c, noise=0.01, token_dim=0), "confined")
    assert f.evidence["indices"] == [2, 5] and f.evidence["what"] == "token rows"


def test_divergence_confined_to_heads():
    r = randn(8, 4 * 16)  # [T, H * hd]
    c = r.copy()
    c[:, 32:48] += randn(8, 16)  # head 2
    found = [f for f in explain(r, c, noise=0.01, token_dim=0, head_dim=16) if f.evidence.get("what") == "heads"]
    assert found and found[0].evidence["indices"] == [2]


def test_divergence_confined_to_experts_through_the_routing():
    routing = np.array([[0, 1], [2, 3], [1, 2], [0, 3], [3, 0], [1, 3]])  # [T, k]
    r = randn(6, 32)
    c = r.copy()
    bad = [t for t in range(6) if 2 in routing[t]]  # expert 2 is broken: tokens 1, 2
    c[bad] += randn(len(bad), 32)
    found = explain(r, c, noise=0.01, token_dim=0, routing=routing)
    experts = [f for f in found if f.evidence.get("what") == "experts"]
    assert experts and experts[0].evidence["indices"] == [2]


# --- saturation, zeroed regions, shift, non-finite ----------------------------------------------------
def test_saturation_at_fp8_max():
    r = randn(32, 32) * 300
    f = only(explain(r, np.clip(r, -448, 448), noise=1e-5), "saturation")
    assert f.evidence["level"] == 448 and f.evidence["format"] == "fp8 e4m3 max"


def test_saturation_at_fp16_max():
    r = randn(16, 16) * 40000
    f = only(explain(r, np.clip(r, -65504, 65504), noise=1e-5), "saturation")
    assert f.evidence["format"] == "fp16 max"


def test_no_saturation_when_the_reference_exceeds_the_candidate_by_noise():
    r = randn(32, 32) * 300
    assert "saturation" not in names(explain(r, r + 30 * randn(32, 32), noise=0.01))


def test_zeroed_rows():
    r = randn(12, 32)
    c = r.copy()
    c[[3, 4]] = 0
    f = only(explain(r, c, noise=1e-5, token_dim=0), "zeroed")
    assert f.evidence["rows"] == [3, 4] and f.evidence["error_share"] == pytest.approx(1.0)


def test_zeros_both_sides_share_are_not_zeroed():
    x = randn(16, 64)
    r = np.maximum(x, 0)  # ReLU: zeros on both sides
    c = np.where(r > 0, r * (1 + 0.1 * randn(16, 64)), 0.0)
    assert "zeroed" not in names(explain(r, c, noise=0.01, token_dim=0))


@pytest.mark.parametrize("n", [1, -2])
def test_sequence_shift(n):
    r = randn(20, 16)
    f = only(explain(r, np.roll(r, n, axis=0), noise=1e-5, token_dim=0), "sequence_shift")
    assert f.evidence["shift"] == n and f.kind == "shift"


def test_a_smooth_sequence_with_noise_is_not_shifted():
    r = np.cumsum(0.05 * randn(40, 16), axis=0) + randn(1, 16)  # neighbouring tokens alike
    c = r + 0.02 * r.std() * randn(40, 16)
    assert "sequence_shift" not in names(explain(r, c, noise=0.01, token_dim=0))


def test_nan_on_both_sides_is_not_an_onset():
    r = randn(10, 8)
    r[3, 3] = np.nan
    c = r * 1.5
    assert names(explain(r, c, noise=1e-5, token_dim=0)) == ["constant_ratio"]


def test_first_nan():
    r = randn(10, 8)
    c = r.copy()
    c[7, 3] = np.nan
    c[9, 0] = np.inf
    f = only(explain(r, c, noise=1e-5, token_dim=0), "nonfinite")
    assert f.evidence["first_index"] == [7, 3] and f.evidence["token_rows"] == [7, 9]
    assert f.evidence["side"] == "candidate" and (f.evidence["nan"], f.evidence["inf"]) == (1, 1)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="equal shapes"):
        explain(randn(2, 3), randn(3, 2))

"""Explain: planted differences must be named with evidence; benign noise must name nothing."""
import pytest
import torch

from inkling_probe.compare.explain import explain

G = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=G)


def names(findings):
    return [f.name for f in findings]


def only(findings, name):
    hits = [f for f in findings if f.name == name]
    assert hits, f"no {name!r} in {[f.summary for f in findings]}"
    return hits[0]


# --- benign pairs: nothing must hold ------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0])  # under, just over and far over the noise
def test_benign_noise_names_nothing(scale):
    r = randn(64, 128)
    c = r + scale * 0.01 * r.std() * randn(64, 128)
    assert explain(r, c, noise=0.01, token_dim=0, head_dim=16, tp_sizes=(2,)) == []


def test_bf16_rounding_of_fp32_names_nothing():
    r = randn(32, 256)
    assert explain(r, r.bfloat16()) == []  # noise defaults to the bf16 threshold


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
    assert f.evidence["matches"][0] == label
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


def test_wrong_input_scale_is_a_2688_ratio_on_the_scale_and_zeroed_blocks_on_the_output():
    from inkling_model import nvfp4

    t, h, i = 32, 64, 32
    x = randn(t, h)  # [T, H] ordinary tokens
    w13, w2 = randn(2 * i, h) / 8, randn(h, i) / 6

    def expert(x, s1, s2):  # NVFP4 activations into both GEMMs of a SwiGLU expert
        gu = nvfp4.fake_quant(x, s1) @ w13.T  # [T, 2I]
        act = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]  # [T, I]
        return nvfp4.fake_quant(act, s2) @ w2.T, act

    calib = torch.cat([x, 100 * randn(1, h)])  # calibration holds one massive token
    _, act_cal = expert(calib, nvfp4.global_scale(calib.abs().max()), torch.tensor(1.0))
    amax1, amax2 = calib.abs().max().float(), act_cal.abs().max().float()
    good, raw = nvfp4.global_scale(amax1), amax1  # the bug: the raw amax used as input_scale
    f = only(explain(good.reshape(1), raw.reshape(1), noise=1e-5), "constant_ratio")
    assert f.evidence["matches"][0] == "2688 = 6*448"

    ref, _ = expert(x, good, nvfp4.global_scale(amax2))
    cand, _ = expert(x, raw, amax2)
    found = explain(ref, cand, noise=0.32, token_dim=0)
    assert "constant_ratio" not in names(found)  # flushed blocks are not a ratio
    z = only(found, "zeroed")
    assert z.evidence["error_share"] > 0.5 and z.evidence["blocks_zeroed"] > 0


def test_partly_flushed_gemm_input_shows_as_lost_energy_on_the_output():
    from inkling_model import nvfp4

    x, w = randn(32, 64), randn(64, 64) / 8  # [T, K], [N, K]
    calib = torch.cat([x, 140 * torch.randn(1, 64, generator=torch.Generator().manual_seed(5))])
    amax = calib.abs().max().float()
    x_raw = nvfp4.fake_quant(x, amax)  # the raw amax as input_scale: most blocks flush
    assert 0.5 < float((x_raw == 0).float().mean()) < 0.9
    ref, cand = nvfp4.fake_quant(x, nvfp4.global_scale(amax)) @ w.T, x_raw @ w.T
    found = explain(ref, cand, noise=0.1, token_dim=0)
    assert names(found) == ["flushed"]
    f = found[0]
    assert f.evidence["energy_ratio"] < 0.75 and f.evidence["lost_share_of_error"] > 0.5
    assert f.evidence["row_norm_ratio"]["median"] < 0.9


def test_a_smaller_constant_scale_is_a_ratio_not_lost_energy():
    r = randn(16, 32)
    assert names(explain(r, r * 0.5, noise=0.01, token_dim=0)) == ["constant_ratio"]


# --- layout permutations ---------------------------------------------------------------------------
def test_transpose():
    r = randn(16, 16)
    assert only(explain(r, r.T.contiguous(), noise=1e-5), "layout_permutation").evidence["permutation"] == "transpose"


def test_gate_up_interleaved_vs_concatenated_both_ways():
    inter = randn(2 * 12, 8)  # [g0, u0, g1, u1, ...] rows
    concat = torch.cat([inter[0::2], inter[1::2]])  # [g; u]
    f = only(explain(inter, concat, noise=1e-5), "layout_permutation")
    assert f.evidence == {**f.evidence, "permutation": "concat_as_interleaved", "dim": 0}
    f = only(explain(concat, inter, noise=1e-5), "layout_permutation")
    assert f.evidence["permutation"] == "interleaved_as_concat" and f.evidence["dim"] == 0


def test_swapped_halves_along_the_right_dim():
    r = randn(6, 10)
    c = torch.cat([r[:, 5:], r[:, :5]], dim=1)
    f = only(explain(r, c, noise=1e-5), "layout_permutation")
    assert (f.evidence["permutation"], f.evidence["dim"]) == ("swapped_halves", 1)


def test_shard_order_for_tp4():
    r = randn(8, 32)
    parts = r.chunk(4, dim=1)
    c = torch.cat([parts[i] for i in (1, 0, 3, 2)], dim=1)
    f = only(explain(r, c, noise=1e-5, tp_sizes=(4,)), "layout_permutation")
    assert f.evidence["permutation"] == "shard_order" and f.evidence["order"] == [1, 0, 3, 2]


def test_fp4_nibble_order():
    fp4 = torch.float4_e2m1fn_x2
    packed = torch.randint(0, 256, (16, 8), dtype=torch.uint8, generator=G)
    swapped = (packed >> 4) | ((packed & 0xF) << 4)
    f = only(explain(packed.view(fp4), swapped.view(fp4), noise=1e-5), "layout_permutation")
    assert f.evidence["permutation"] == "fp4_nibble_order"


# --- confinement ------------------------------------------------------------------------------------
def test_divergence_confined_to_exact_token_rows():
    r = randn(16, 64)
    c = r + 1e-4 * randn(16, 64)
    c[[2, 5]] = c[[2, 5]] * 1.3
    f = only(explain(r, c, noise=0.01, token_dim=0), "confined")
    assert f.evidence["indices"] == [2, 5] and f.evidence["what"] == "token rows"


def test_divergence_confined_to_heads():
    r = randn(8, 4 * 16)  # [T, H * hd]
    c = r.clone()
    c[:, 32:48] += randn(8, 16)  # head 2
    found = [f for f in explain(r, c, noise=0.01, token_dim=0, head_dim=16) if f.evidence.get("what") == "heads"]
    assert found and found[0].evidence["indices"] == [2]


def test_divergence_confined_to_experts_through_the_routing():
    routing = torch.tensor([[0, 1], [2, 3], [1, 2], [0, 3], [3, 0], [1, 3]])  # [T, k]
    r = randn(6, 32)
    c = r.clone()
    bad = [t for t in range(6) if 2 in routing[t].tolist()]  # expert 2 is broken: tokens 1, 2
    c[bad] += randn(len(bad), 32)
    found = explain(r, c, noise=0.01, token_dim=0, routing=routing)
    experts = [f for f in found if f.evidence.get("what") == "experts"]
    assert experts and experts[0].evidence["indices"] == [2]


# --- saturation, zeroed regions, shift, non-finite ----------------------------------------------------
def test_saturation_at_fp8_max():
    r = randn(32, 32) * 300
    c = r.clamp(-448, 448)
    f = only(explain(r, c, noise=1e-5), "saturation")
    assert f.evidence["level"] == 448 and f.evidence["format"] == "fp8 e4m3 max"


def test_saturation_at_fp16_max():
    r = randn(16, 16) * 40000
    f = only(explain(r, r.clamp(-65504, 65504), noise=1e-5), "saturation")
    assert f.evidence["format"] == "fp16 max"


def test_zeroed_rows():
    r = randn(12, 32)
    c = r.clone()
    c[[3, 4]] = 0
    f = only(explain(r, c, noise=1e-5, token_dim=0), "zeroed")
    assert f.evidence["rows"] == [3, 4] and f.evidence["error_share"] == pytest.approx(1.0)


@pytest.mark.parametrize("n", [1, -2])
def test_sequence_shift(n):
    r = randn(20, 16)
    c = torch.roll(r, shifts=n, dims=0)
    f = only(explain(r, c, noise=1e-5, token_dim=0), "sequence_shift")
    assert f.evidence["shift"] == n


def test_first_nan():
    r = randn(10, 8)
    c = r.clone()
    c[7, 3] = float("nan")
    c[9, 0] = float("inf")
    f = only(explain(r, c, noise=1e-5, token_dim=0), "nonfinite")
    assert f.evidence["first_index"] == [7, 3] and f.evidence["token_rows"] == [7, 9]
    assert f.evidence["side"] == "candidate" and (f.evidence["nan"], f.evidence["inf"]) == (1, 1)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="equal shapes"):
        explain(randn(2, 3), randn(3, 2))

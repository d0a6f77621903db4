"""NVFP4 emulation against hand-computed values (ModelOpt semantics)."""
import pytest
import torch

from inkling_model import nvfp4


def test_e2m1_table_by_nibble():
    table = nvfp4.e2m1_table()
    assert table[:8].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert table[9:].tolist() == [-0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert torch.signbit(table[8])  # code 8 is -0.0


def test_exact_values_round_trip():
    vals = nvfp4.e2m1_table()
    expected = torch.arange(16, dtype=torch.uint8)
    expected[8] = 0  # -0.0 is not < 0: ModelOpt's sign bit is (x < 0)
    assert torch.equal(nvfp4.round_to_e2m1(vals), expected)


@pytest.mark.parametrize("x, expected", [
    (0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0),
    (-0.25, -0.0), (-0.75, -1.0), (-2.5, -2.0), (-5.0, -4.0),
])
def test_ties_go_to_even_code(x, expected):
    got = nvfp4.e2m1_value(nvfp4.round_to_e2m1(torch.tensor([x])))
    assert got.item() == expected


@pytest.mark.parametrize("x, expected", [
    (0.2499, 0.0), (0.2501, 0.5), (0.7499, 0.5), (1.2501, 1.5), (1.7499, 1.5), (2.5001, 3.0),
    (3.4999, 3.0), (4.9999, 4.0), (5.0001, 6.0), (6.0, 6.0), (7.0, 6.0), (1e9, 6.0), (-1e9, -6.0),
])
def test_round_to_nearest_and_saturate(x, expected):
    assert nvfp4.e2m1_value(nvfp4.round_to_e2m1(torch.tensor([x]))).item() == expected


def test_negative_small_is_negative_zero():
    code = nvfp4.round_to_e2m1(torch.tensor([-0.1]))
    assert code.item() == 8


def test_nibble_order_even_element_low():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    packed = nvfp4.pack(codes)
    assert packed.tolist() == [[0x21, 0x0F]]
    assert torch.equal(nvfp4.unpack(packed), codes)


def test_pack_unpack_all_256_bytes():
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    codes = nvfp4.unpack(every)
    assert codes.shape == (512,)
    assert torch.equal(codes[0::2], every & 0x0F)
    assert torch.equal(nvfp4.pack(codes), every)


def test_quantize_hand_computed_block():
    # amax 6 -> scale_2 = 6/2688; block amax 6 -> block scale 448 (exact in e4m3)
    x = torch.tensor([[6.0, -3.0, 1.5, 0.25] + [0.0] * 12])  # [1, 16]
    packed, scale, scale_2 = nvfp4.quantize(x)
    assert scale_2.item() == pytest.approx(6.0 / 2688)
    assert scale.dtype == torch.float8_e4m3fn and scale.float().item() == 448.0
    codes = nvfp4.unpack(packed)[0, :4].tolist()
    assert codes == [7, 13, 3, 0]  # 6, -3, 1.5, 0.25 -> 0 (tie to even)
    deq = nvfp4.dequantize(packed, scale, scale_2)
    assert torch.allclose(deq[0, :4], torch.tensor([6.0, -3.0, 1.5, 0.0]))


def test_quantize_shapes_and_dtypes():
    w = torch.randn(3, 8, 64)  # [E, out, in]
    packed, scale, scale_2 = nvfp4.quantize(w)
    assert packed.shape == (3, 8, 32) and packed.dtype == torch.uint8
    assert scale.shape == (3, 8, 4) and scale.dtype == torch.float8_e4m3fn
    assert scale_2.shape == () and scale_2.dtype == torch.float32


def test_zero_block_gets_scale_one_and_dequantizes_to_zero():
    x = torch.zeros(2, 32)
    x[0, 16:] = torch.linspace(-1, 1, 16)
    packed, scale, scale_2 = nvfp4.quantize(x)
    assert scale.float()[0, 0].item() == 1.0 and scale.float()[1].tolist() == [1.0, 1.0]
    deq = nvfp4.dequantize(packed, scale, scale_2)
    assert torch.count_nonzero(deq[0, :16]) == 0 and torch.count_nonzero(deq[1]) == 0


def test_saturation_beyond_block_max():
    # input_scale set for amax 1; a block with amax 10 saturates the fp8 scale at 448
    s = nvfp4.global_scale(1.0)
    x = torch.zeros(1, 16)
    x[0, 0], x[0, 1] = 10.0, 0.5
    out = nvfp4.fake_quant(x, s)
    assert out[0, 0].item() == pytest.approx(1.0)  # clipped to 6 * 448 * s = amax
    assert out[0, 1].item() == pytest.approx(0.5)


def test_scale_underflow_flushes_block():
    # block scale = block_amax / (6 * s); below 2**-10 it underflows to 0: block zeroed.
    s = torch.tensor(1.0)
    quiet = torch.full((1, 16), 6 * 2**-10 * 0.99)
    loud = torch.full((1, 16), 6 * 2**-10 * 1.2)  # rounds up to the subnormal 2**-9
    assert nvfp4.block_scales(quiet, s).float().item() == 0.0
    assert nvfp4.block_scales(loud, s).float().item() == 2**-9
    assert torch.count_nonzero(nvfp4.fake_quant(quiet, s)) == 0
    # at scale 2**-9 the element x / 2**-9 = 3.6 rounds to 4: 4 * 2**-9
    assert torch.allclose(nvfp4.fake_quant(loud, s), torch.full((1, 16), 4 * 2**-9))


def test_dequant_quant_error_bound():
    torch.manual_seed(0)
    w = torch.randn(64, 256)
    packed, scale, scale_2 = nvfp4.quantize(w)
    deq = nvfp4.dequantize(packed, scale, scale_2)
    rel = ((deq - w).norm() / w.norm()).item()
    assert 0.05 < rel < 0.15  # E2M1 on Gaussian blocks: ~0.09
    # per element: half a step at the top of each block's grid (step 2 of 6 -> 1/6 of block amax)
    bmax = w.unflatten(-1, (-1, 16)).abs().amax(-1, keepdim=True)
    err = (deq - w).abs().unflatten(-1, (-1, 16))
    assert bool((err <= bmax / 6 * 1.07 + 1e-6).all())


def test_fake_quant_equals_quantize_dequantize():
    torch.manual_seed(1)
    x = torch.randn(8, 64) * 3
    s = nvfp4.global_scale(x.abs().amax())
    fq = nvfp4.fake_quant(x, s)
    packed, scale, _ = nvfp4.quantize(x, s)
    assert torch.equal(fq, nvfp4.dequantize(packed, scale, s))
    assert fq.dtype == x.dtype
    assert nvfp4.fake_quant(x.bfloat16(), s).dtype == torch.bfloat16


def test_raw_amax_flushes_quiet_blocks():
    # INKLING.md: N(0,1) activations, 4 outlier channels x100; input_scale = raw amax flushes most
    # ordinary blocks, the correct amax / 2688 keeps them.
    torch.manual_seed(0)
    x = torch.randn(512, 256)
    x[:, :4] *= 100
    amax = x.abs().amax()
    ordinary = x[:, 16:]
    good = nvfp4.fake_quant(x, nvfp4.global_scale(amax))[:, 16:]
    bad = nvfp4.fake_quant(x, amax)[:, 16:]
    zeroed = (bad.unflatten(-1, (-1, 16)).abs().amax(-1) == 0).float().mean().item()
    rel_good = ((good - ordinary).norm() / ordinary.norm()).item()
    rel_bad = ((bad - ordinary).norm() / ordinary.norm()).item()
    assert rel_good < 0.12 and zeroed > 0.3 and rel_bad > 0.5


def test_rejects_bad_shapes():
    with pytest.raises(ValueError):
        nvfp4.quantize(torch.randn(4, 20))
    with pytest.raises(ValueError):
        nvfp4.pack(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError):
        nvfp4.unpack(torch.zeros(3, dtype=torch.int32))

"""Every bit pattern of every stored dtype survives the store's encode/decode exactly."""
import numpy as np
import pytest
import torch

from inkling_probe.store.dtypes import E8M0, FP4X2, FP8, bf16_bits_to_float32, decode, dtype_name, encode

EIGHT_BIT = FP8 + [E8M0]


def _all_bytes(dtype):
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)


def test_bf16_all_65536_patterns_bit_exact_and_readable_as_fp32():
    """bf16 is stored as its own bits (schema 3); read back, its exact float32 is bits << 16."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    stored, storage = encode(x)
    assert storage == "native" and stored.dtype == np.uint16
    back = decode(stored, "bfloat16")
    assert torch.equal(back.view(torch.int16), x.view(torch.int16))  # NaN payloads too
    wide = bf16_bits_to_float32(stored)
    finite = ~torch.isnan(x)
    assert torch.equal(torch.from_numpy(wide)[finite], x.float()[finite])  # true values
    assert torch.equal(decode(wide, "bfloat16").view(torch.int16), x.view(torch.int16))  # the float32 form too


def test_bf16_of_schema_2_dumps_still_decodes():
    """Dumps of schema 2 hold bf16 as float32 (bits << 16, 'upcast'): decoded bit-exact as before."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    stored, storage = encode(x.float(), "bfloat16")
    assert storage == "upcast" and stored.dtype == np.float32
    finite = ~torch.isnan(x)
    assert torch.equal(decode(stored, "bfloat16").view(torch.int16)[finite], x.view(torch.int16)[finite])


@pytest.mark.parametrize("dtype", EIGHT_BIT, ids=dtype_name)
def test_eight_bit_floats_all_patterns_bit_exact(dtype):
    x = _all_bytes(dtype).reshape(16, 16)
    stored, storage = encode(x)
    assert storage == "upcast"
    back = decode(stored, dtype_name(dtype))
    assert back.dtype == dtype and back.shape == x.shape
    assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))
    values = x.float()
    finite = ~torch.isnan(values)
    assert torch.equal(torch.from_numpy(stored).float()[finite], values[finite])
    assert np.isnan(stored.astype(np.float32)[~finite.numpy()]).all()


def test_packed_fp4_is_stored_as_its_bytes():
    x = _all_bytes(FP4X2)
    stored, storage = encode(x)
    assert storage == "raw" and stored.dtype == np.uint8 and stored.tolist() == list(range(256))
    assert torch.equal(decode(stored, "float4_e2m1fn_x2").view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.int64, torch.int32,
                                   torch.int16, torch.int8, torch.uint8, torch.bool], ids=dtype_name)
def test_native_dtypes_round_trip(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 7, generator=g) * 100).to(dtype)
    stored, storage = encode(x)
    assert storage == "native"
    back = decode(stored, dtype_name(dtype))
    assert back.dtype == dtype and torch.equal(back, x)


def test_edited_values_are_rejected_not_misread():
    stored, _ = encode(_all_bytes(FP8[0]))
    stored = stored.copy()
    stored[3] = np.float16(0.3)  # not an e4m3 value
    with pytest.raises(ValueError, match="not float8_e4m3fn values"):
        decode(stored, "float8_e4m3fn")

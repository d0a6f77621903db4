"""NVFP4 emulation in torch with ModelOpt / engine-kernel semantics.

Format (docs/NVFP4.md has the full story):
- E2M1 codes (bit 3 = sign): 0, .5, 1, 1.5, 2, 3, 4, 6; round to nearest, ties to even code.
- Blocks of 16 along the last dim. Per-tensor ``scale_2 = amax / (6 * 448)``.
- Per-block scale ``block_amax / (6 * scale_2)`` saturated at 448 and stored as float8_e4m3fn
  (round to nearest even). e4m3's smallest subnormal is 2**-9: a scale in (2**-10, 2**-9)
  rounds up to 2**-9, one <= 2**-10 underflows to 0 and its block is flushed to zero (what the
  engines' quantize kernels do with a zero block scale). An all-zero block gets scale 1.0.
- Dequant: ``e2m1[nibble] * float(block_scale) * scale_2``. Two codes per byte, the even
  element in the low nibble.
"""

from __future__ import annotations

import torch

BLOCK = 16
FP4_MAX = 6.0
FP8_MAX = 448.0
SCALE_DENOM = FP4_MAX * FP8_MAX  # 2688: input_scale = amax / SCALE_DENOM

# |value| for codes 0..7; codes 8..15 are the negatives.
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring magnitudes. A tie goes to the even code: up at 0.75, 1.75
# and 3.5 (upper code even), down at 0.25, 1.25, 2.5 and 5.0.
_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_UP = (False, True, False, True, False, True, False)


_TABLES: dict[torch.device, torch.Tensor] = {}


def e2m1_table(device=None) -> torch.Tensor:
    """The 16 E2M1 values indexed by nibble (fp32), negatives at 8..15 (code 8 is -0.0).

    Made once per device (a host-to-device copy, which a CUDA graph capture must not contain: the
    decode step's warm-up makes it before capture)."""
    device = torch.device(device or "cpu")
    if device not in _TABLES:
        mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=device)
        _TABLES[device] = torch.cat([mags, -mags])
    return _TABLES[device]


def round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Codes (uint8 nibbles) of x rounded to E2M1, ties to even, saturating at +-6.

    The sign bit is set for x < 0 (a negative value that rounds to 0 gives code 8, -0.0).
    NaN is not supported: callers quantize finite tensors only.
    """
    a = x.abs().float()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for bound, tie_up in zip(_BOUNDS, _TIE_UP):
        code += (a >= bound if tie_up else a > bound).to(torch.uint8)
    return code | ((x < 0).to(torch.uint8) << 3)


def e2m1_value(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of E2M1 codes (any integer dtype holding 0..15)."""
    return e2m1_table(codes.device)[codes.long()]


def pack(codes: torch.Tensor) -> torch.Tensor:
    """[..., 2n] nibble codes -> [..., n] uint8 bytes, even element in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack needs an even last dim, got {tuple(codes.shape)}")
    codes = codes.to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4)  # [..., n]


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """[..., n] uint8 bytes -> [..., 2n] nibble codes (inverse of pack)."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack needs uint8, got {packed.dtype}")
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack([low, high], dim=-1).flatten(-2)  # [..., 2n]


def _blocks(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % BLOCK:
        raise ValueError(f"last dim {x.shape[-1]} is not a multiple of the NVFP4 block {BLOCK}")
    return x.float().unflatten(-1, (x.shape[-1] // BLOCK, BLOCK))  # [..., nb, 16]


def global_scale(amax: torch.Tensor | float) -> torch.Tensor:
    """Per-tensor scale_2 (or activation input_scale) for a given amax: amax / (6 * 448)."""
    return torch.as_tensor(amax, dtype=torch.float32) / SCALE_DENOM


def block_scales(x: torch.Tensor, scale_2: torch.Tensor, zero_block_one: bool = True) -> torch.Tensor:
    """fp8 e4m3 per-block scales [..., K/16] of x for a per-tensor scale_2.

    Saturates at 448 (an input louder than its calibration amax); underflows to 0 below
    2**-10 (e4m3 round-to-nearest-even). With zero_block_one, an all-zero block gets 1.0
    (ModelOpt's weight export rule).
    """
    amax = _blocks(x).abs().amax(dim=-1)  # [..., nb]
    scale = (amax / (FP4_MAX * scale_2.float())).clamp(max=FP8_MAX)
    if zero_block_one:
        scale = torch.where(amax == 0, torch.ones_like(scale), scale)
    return scale.to(torch.float8_e4m3fn)


def _quantize_codes(x: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    denom = (scale.float() * scale_2.float()).unsqueeze(-1)  # [..., nb, 1]
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    codes = round_to_e2m1(_blocks(x) / safe)  # [..., nb, 16]
    codes = torch.where(denom > 0, codes, torch.zeros_like(codes))  # underflowed scale: block is 0
    return codes.flatten(-2)  # [..., K]


def quantize(x: torch.Tensor, scale_2: torch.Tensor | None = None):
    """Quantize a weight [..., out, in] to NVFP4.

    Returns (packed uint8 [..., out, in/2], block scale fp8 [..., out, in/16], scale_2 fp32 []).
    scale_2 defaults to amax(x) / (6 * 448) over the whole tensor.
    """
    if scale_2 is None:
        scale_2 = global_scale(x.detach().abs().amax().float())
    scale_2 = scale_2.float().to(x.device)
    scale = block_scales(x, scale_2)
    return pack(_quantize_codes(x, scale, scale_2)), scale, scale_2


def dequantize(packed: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """NVFP4 (packed [..., K/2], fp8 scale [..., K/16], scale_2) -> dense [..., K]."""
    vals = e2m1_value(unpack(packed)).unflatten(-1, (-1, BLOCK))  # [..., nb, 16]
    if vals.shape[:-1] != scale.shape:
        raise ValueError(f"packed {tuple(packed.shape)} and scale {tuple(scale.shape)} do not match")
    out = vals * (scale.float() * scale_2.float()).unsqueeze(-1)  # [..., nb, 16]
    return out.flatten(-2).to(dtype)  # [..., K]


def fake_quant(x: torch.Tensor, input_scale: torch.Tensor) -> torch.Tensor:
    """Activation fake-quant: quantize x [..., K] with a static per-tensor input_scale, dequantize.

    input_scale is ModelOpt's ``amax / (6 * 448)``. Block scales are computed on the fly;
    a block whose fp8 scale underflows comes back as zeros. Returns x's dtype.
    """
    input_scale = input_scale.float().to(x.device)
    scale = block_scales(x, input_scale, zero_block_one=True)
    codes = _quantize_codes(x, scale, input_scale)  # [..., K]
    vals = e2m1_value(codes).unflatten(-1, (-1, BLOCK))  # [..., nb, 16]
    out = vals * (scale.float() * input_scale).unsqueeze(-1)
    return out.flatten(-2).to(x.dtype)

"""The planted compile-only faults (model/switches/faults.py): code that is right eagerly and wrong compiled.

Each reproduces a real class of "wrong only under torch.compile":

- ``fake_kernel_dtype``: a custom op (:func:`silu_fp32`) whose real kernel returns fp32 while its fake
  kernel says "the input's dtype"; the caller writes the result into a buffer of its dtype (eager casts
  there). Inductor plans its buffers from the fake kernel and reads the fp32 bytes as bf16. Only bf16
  runs are affected (in fp32 the two kernels agree), and only Inductor (aot_eager runs the eager copy).
- ``compiled_branch``: a "fast path" taken only when ``torch.compiler.is_compiling()``, with a bug
  (the RMS statistic as a sum, not a mean): dynamo traces the other branch than eager runs, so even the
  plain ``eager`` backend diverges.
- ``fusion_rounding``: magic-number rounding to a grid, ``(x*4 + 192) - 192``, which relies on eager
  rounding the sum to bf16; Inductor fuses it and keeps fp32, so nothing is rounded
  (``torch._inductor.config.emulate_precision_casts = True`` restores eager's rounding). bf16 only.
"""
from __future__ import annotations

import torch

SNAP_SCALE = 4.0  # a grid of 1/4 for |x| < 16 (192 + 4x stays in bf16's [128, 256): spacing 1)
SNAP_MAGIC = 192.0


@torch.library.custom_op("inkling_model::silu_fp32", mutates_args=())
def silu_fp32(x: torch.Tensor) -> torch.Tensor:
    """silu computed in fp32 and returned in fp32 (the real kernel forgets the cast back)."""
    return torch.nn.functional.silu(x.float())


@silu_fp32.register_fake
def _silu_fp32_fake(x):
    return torch.empty_like(x)  # the planted lie: the input's dtype


def swiglu_through_op(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for interleaved rows, silu through the custom op, written into a buffer of h's dtype."""
    act = torch.empty_like(h)
    act.copy_(silu_fp32(h))  # eager: casts fp32 -> h's dtype; Inductor: trusts the fake dtype, drops the copy
    return act[..., 0::2] * h[..., 1::2]


def compiled_rms_norm(norm, h: torch.Tensor) -> torch.Tensor:
    """The norm's "compiled fast path": taken only under torch.compile, and wrong (sum for mean)."""
    if torch.compiler.is_compiling():
        x = h.float()
        x = x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + norm.eps)
        return norm.weight * x.to(h.dtype)
    return norm(h)


def snap_to_grid(x: torch.Tensor) -> torch.Tensor:
    """Round x to a grid of 1/SNAP_SCALE by the magic number (relies on the sum being rounded to bf16)."""
    return ((x * SNAP_SCALE + SNAP_MAGIC) - SNAP_MAGIC) / SNAP_SCALE

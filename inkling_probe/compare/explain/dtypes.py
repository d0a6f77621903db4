"""Float formats by name: epsilon, largest finite value, and the default noise level.

The epsilons and the default noise are compare.floor's (numpy-free, by dtype name): the default
noise is the dtype-aware base threshold of docs/COMPARE.md, 4 x eps of the coarser float dtype of
the pair, at least 1e-5 for fp32 (kernels and reduction orders differ) and 1e-12 for fp64, at most 0.5.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.floor import EPS, base_threshold
from inkling_probe.compare.floor import coarsest as _coarsest

# the largest finite value of each format, as saturation names it
FORMAT_MAX = {448.0: "fp8 e4m3 max", 240.0: "fp8 e4m3fnuz max", 57344.0: "fp8 e5m2 max",
              65504.0: "fp16 max", 6.0: "fp4 e2m1 max", float((2 - 2.0 ** -7) * 2.0 ** 127): "bf16 max"}


def dtype_name(dtype) -> str | None:
    """'bfloat16' for 'bfloat16', torch.bfloat16, np.dtype('float32') -> 'float32'; None stays None."""
    if dtype is None:
        return None
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        return np.dtype(dtype).name
    return str(dtype).removeprefix("torch.")


def eps(name: str | None) -> float:
    """The format's machine epsilon; 0 for non-floats and unknown names."""
    return EPS.get(name, 0.0)


def coarsest(*names: str | None) -> str | None:
    """The float dtype name with the largest epsilon (None when there is none)."""
    return _coarsest(*names)


def default_noise(*names: str | None) -> float:
    """4 x eps of the coarsest float dtype among ``names`` (fp32's when none is a float)."""
    return base_threshold(coarsest(*names))

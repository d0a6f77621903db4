"""Round float64 values to a narrower float format in numpy, round-to-nearest-even.

bf16 and fp16 are rounded arithmetically: the quantum of ``x`` is ``2**(max(e, emin) - mbits)``
with ``e = floor(log2 |x|)`` (subnormals share the smallest normal quantum), ``np.rint`` rounds
half to even, and values past the format's max become inf. fp8 e4m3fn is rounded by lookup in the
table of its 127 non-negative finite values (ties go to the even code) and saturates at +-448, as
torch's cast does.
"""
from __future__ import annotations

import numpy as np

# name: (mantissa bits, smallest normal exponent, largest finite value)
ARITH = {"bfloat16": (7, -126, (2 - 2.0 ** -7) * 2.0 ** 127), "float16": (10, -14, 65504.0)}


def _e4m3_table() -> np.ndarray:
    """Value of each non-negative e4m3fn code 0..126 (127 is NaN), increasing with the code."""
    codes = np.arange(127)
    e, m = codes >> 3, codes & 7
    return np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))


E4M3 = _e4m3_table()


def round_arith(x: np.ndarray, mbits: int, emin: int, top: float) -> np.ndarray:
    _, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
    q = np.maximum(e - 1, emin) - mbits
    y = np.ldexp(np.rint(np.ldexp(x, -q)), q)
    return np.where(np.abs(y) > top, np.copysign(np.inf, x), y)


def round_e4m3(x: np.ndarray) -> np.ndarray:
    a = np.minimum(np.abs(x), E4M3[-1])
    hi = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)  # E4M3[hi - 1] < a <= E4M3[hi]
    lo = hi - 1
    dlo, dhi = a - E4M3[lo], E4M3[hi] - a
    up = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    y = np.where(up, E4M3[hi], E4M3[lo])
    return np.where(np.isnan(x), np.nan, np.copysign(y, x))


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` rounded to format ``name`` ('bfloat16', 'float16', 'float8_e4m3fn'), as float64."""
    if name == "float8_e4m3fn":
        return round_e4m3(x)
    return round_arith(x, *ARITH[name])


FORMATS = ("bfloat16", "float16", "float8_e4m3fn")

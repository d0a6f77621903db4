"""A deterministic sample of a pair: evenly spaced indices along every dim (an ``np.ix_`` grid).

Hypotheses that must try many transforms (layouts, shifts, splits, rounding formats) try them on
the sample first; only one that holds there is verified on the whole pair. The grid keeps whole
dims where it can and halves the longest dim until it holds at most ``SAMPLE`` elements, so
small tensors are sampled whole (and need no second look).
"""
from __future__ import annotations

import math

import numpy as np

SAMPLE = 1 << 14


def spread(n: int, k: int) -> np.ndarray:
    """``k`` evenly spaced indices of ``range(n)``, first and last included."""
    if k >= n:
        return np.arange(n)
    return np.floor(np.linspace(0, n - 1, k) + 0.5).astype(np.int64)  # steps >= 1: distinct, increasing


def sizes(shape, budget: int = SAMPLE) -> list[int]:
    """How many indices of each dim the grid takes."""
    s = list(shape)
    while math.prod(s) > budget:
        i = max(range(len(s)), key=s.__getitem__)
        s[i] = (s[i] + 1) // 2
    return s


def grid(shape, budget: int = SAMPLE, at: tuple[int, np.ndarray] | None = None) -> tuple:
    """The ``np.ix_`` index of the sample; ``at = (d, idx)`` fixes dim d's indices (others shrink)."""
    shape = tuple(shape)
    if not shape:
        return ()
    if at is None:
        return np.ix_(*[spread(n, k) for n, k in zip(shape, sizes(shape, budget))])
    d, fixed = at
    rest = shape[:d] + shape[d + 1:]
    idx = [spread(n, k) for n, k in zip(rest, sizes(rest, max(1, budget // max(1, len(fixed)))))]
    return np.ix_(*idx[:d], np.asarray(fixed), *idx[d:])


def chunk_offsets(n: int, parts: int, budget: int = SAMPLE) -> np.ndarray:
    """Indices of dim n taking the same offsets within each of ``parts`` equal chunks."""
    m = n // parts
    q = spread(m, max(1, budget // parts))
    return (np.arange(parts)[:, None] * m + q).reshape(-1)


def is_whole(shape, budget: int = SAMPLE) -> bool:
    """True when the sample of ``shape`` is every element."""
    return math.prod(shape) <= budget

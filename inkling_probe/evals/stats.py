"""Paired statistics: the exact McNemar (sign) test and a seeded bootstrap CI of a mean difference."""
from __future__ import annotations

import math

import numpy as np

EXACT_UP_TO = 2000  # discordant pairs summed as exact integers up to here, in log space beyond


def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n <= EXACT_UP_TO:
        return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    logs = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(k + 1)])
    top = logs.max()
    return float(min(1.0, math.exp(top - n * math.log(2)) * np.exp(logs - top).sum()))


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p: the binomial test of the discordant pairs (not the chi-square
    approximation), ``min(1, 2 P(X <= min(a_only, b_only)))`` with X ~ Bin(a_only + b_only, 1/2)."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binom_cdf_half(min(a_only, b_only), n))


def bootstrap_ci(clusters: list[np.ndarray], seed: int = 0, resamples: int = 10000,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile CI of the mean of all values, resampling whole clusters with replacement.

    A cluster is one item's differences (one per seed when runs repeat seeds), so repeated runs of
    an item move together. ``seed`` makes the interval reproducible.
    """
    sums = np.array([c.sum() for c in clusters], np.float64)  # [n]
    counts = np.array([c.size for c in clusters], np.float64)  # [n]
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)  # [B]
    chunk = max(1, 2_000_000 // len(clusters))  # resamples per pass: index arrays stay ~16 MB
    for start in range(0, resamples, chunk):
        pick = rng.integers(0, len(clusters), size=(min(chunk, resamples - start), len(clusters)))  # [b, n]
        means[start: start + len(pick)] = sums[pick].sum(1) / counts[pick].sum(1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)

"""Paired statistics against hand-computed answers."""

import math

import numpy as np
import pytest

from inkling_probe.evals import stats


@pytest.mark.parametrize("a_only,b_only,p", [
    (1, 6, 2 * (1 + 7) / 2 ** 7),   # 0.125
    (0, 5, 2 / 2 ** 5),             # 0.0625
    (6, 0, 2 / 2 ** 6),             # 0.03125, symmetric in the two sides
    (2, 8, 2 * (1 + 10 + 45) / 2 ** 10),  # 0.109375
    (3, 3, 1.0), (0, 0, 1.0), (0, 1, 1.0),
])
def test_mcnemar_exact_by_hand(a_only, b_only, p):
    assert stats.mcnemar_exact(a_only, b_only) == pytest.approx(p, rel=1e-12)


def test_mcnemar_is_not_the_chi_square_approximation():
    # chi-square with continuity correction for (1, 6): (|1-6|-1)^2/7 = 2.286 -> p 0.131; exact 0.125
    assert stats.mcnemar_exact(1, 6) == 0.125


def test_log_space_binomial_matches_exact_integers():
    n, k = 3000, 1440
    exact = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    assert stats.binom_cdf_half(k, n) == pytest.approx(exact, rel=1e-9)
    assert stats.binom_cdf_half(-1, 5) == 0.0 and stats.binom_cdf_half(5, 5) == 1.0


def test_bootstrap_by_hand():
    # two items, deltas 0 and 1: resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4
    assert stats.bootstrap_ci([np.array([0.0]), np.array([1.0])]) == (0.0, 1.0)
    # equal deltas: a point interval
    assert stats.bootstrap_ci([np.array([0.25])] * 7) == (0.25, 0.25)
    # 80% interval of the two-item case: 10th and 90th percentiles fall inside {0, .5, 1}'s steps
    lo, hi = stats.bootstrap_ci([np.array([0.0]), np.array([1.0])], level=0.4)
    assert (lo, hi) == (0.5, 0.5)


def test_bootstrap_is_seeded_and_resamples_items_whole():
    clusters = [np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.0])] + [np.array([v]) for v in np.linspace(-1, 1, 30)]
    a = stats.bootstrap_ci(clusters, seed=3)
    assert a == stats.bootstrap_ci(clusters, seed=3) and a != stats.bootstrap_ci(clusters, seed=4)
    # a cluster of four equal values moves as one: the two-cluster case gives means 1, 0.8 or 0 only
    assert stats.bootstrap_ci(clusters[:2], level=0.4) == (0.8, 0.8)

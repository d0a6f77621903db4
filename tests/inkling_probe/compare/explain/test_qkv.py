"""q/k/v chunk order: three equal chunks and unequal GQA splits, found with or without the head dim."""
import numpy as np
import pytest

from inkling_probe.compare.explain import explain
from inkling_probe.compare.explain.qkv import source_index, splits

from . import names, only, randn


def _reorder(r, sizes, order):
    parts = np.split(r, np.cumsum(sizes)[:-1], axis=-1)
    return np.concatenate([parts[i] for i in order], axis=-1)


def test_splits_of_a_gqa_projection():
    assert splits(192, 16) == [(160, 16), (128, 32), (96, 48), (64, 64)]  # 12 heads: 10+2x1, 8+2x2, 6+2x3, 4+2x4
    assert (128, 32) in splits(192, None) and (64, 64) in splits(192, None)


@pytest.mark.parametrize("order", [(1, 0, 2), (0, 2, 1), (2, 0, 1), (1, 2, 0)])
def test_source_index_undoes_the_reorder(order):
    r = np.arange(12.0)
    c = _reorder(r, [6, 3, 3], order)
    np.testing.assert_array_equal(c[source_index([6, 3, 3], order)], r)


def test_three_equal_chunks_in_another_order():
    r = randn(16, 3 * 64)
    f = only(explain(r, _reorder(r, [64, 64, 64], (1, 2, 0)), noise=1e-5, token_dim=0), "layout_permutation")
    assert f.evidence["permutation"] == "chunk_order" and f.evidence["order"] == [1, 2, 0]
    assert f.evidence["names"] == "[k, v, q]" and f.evidence["sizes"] == [64, 64, 64]


@pytest.mark.parametrize("head_dim", [16, None])
def test_unequal_gqa_split_k_before_q(head_dim):
    r = randn(16, (8 + 2 * 2) * 16)  # 8 q heads, 2 kv heads, head_dim 16: sizes [128, 32, 32]
    f = only(explain(r, _reorder(r, [128, 32, 32], (1, 0, 2)), noise=1e-5, token_dim=0, head_dim=head_dim),
             "layout_permutation")
    assert (f.evidence["permutation"], f.evidence["sizes"], f.evidence["names"]) == ("chunk_order", [128, 32, 32], "[k, q, v]")


def test_k_and_v_swapped():
    r = randn(16, (8 + 2 * 2) * 16)
    f = only(explain(r, _reorder(r, [128, 32, 32], (0, 2, 1)), noise=1e-5, head_dim=16), "layout_permutation")
    assert f.evidence["names"] == "[q, v, k]"


def test_noise_on_a_qkv_shaped_tensor_is_no_chunk_order():
    r = randn(16, (8 + 2 * 2) * 16)
    assert explain(r, r + 0.05 * randn(16, 192), noise=0.01, token_dim=0, head_dim=16) == []


def test_a_reordered_pair_with_noise_over_it_is_no_chunk_order():
    r = randn(16, 192)
    c = _reorder(r, [128, 32, 32], (1, 0, 2)) + 0.2 * randn(16, 192)
    assert "layout_permutation" not in names(explain(r, c, noise=0.01, head_dim=16))

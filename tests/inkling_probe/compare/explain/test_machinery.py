"""The machinery under every hypothesis: blocks cover each value once, lazy re-indexed views equal
numpy's indexing, the sample screens but the whole decides, and memory stays bounded."""
import tracemalloc

import numpy as np
import pytest

from inkling_probe.compare.explain import Context, Finding, KINDS, explain
from inkling_probe.compare.explain.base import KIND_OF
from inkling_probe.compare.explain.blocks import Remapped, block_keys, rel
from inkling_probe.compare.explain.dtypes import default_noise
from inkling_probe.compare.explain.sample import grid

from . import names, only, randn


@pytest.mark.parametrize("shape,budget", [((3, 5, 7), 4), ((3, 5, 7), 1000), ((37,), 8), ((2, 3, 40), 16), ((), 8)])
def test_blocks_cover_every_value_once(shape, budget):
    seen = np.zeros(shape, int)
    for key in block_keys(shape, budget):
        seen[key] += 1
    assert (seen == 1).all()


def test_remapped_view_equals_numpy_indexing():
    x = randn(4, 6, 10)
    src = np.array([5, 6, 7, 8, 9, 0, 1, 2, 3, 4])[::-1].copy()  # many runs
    halves = np.r_[5:10, 0:5]  # two runs: sliced copy
    for d, s in ((2, src), (2, halves), (1, np.r_[3:6, 0:3])):
        view, want = Remapped(x, d, s), np.take(x, s, axis=d)
        for key in list(block_keys(x.shape, 7)) + [grid(x.shape, 20)]:
            np.testing.assert_array_equal(view[key], want[key])


def test_rel_block_by_block_equals_the_direct_formula():
    r, c = randn(33, 70), randn(33, 70)
    assert rel(r, c, budget=64) == pytest.approx(np.linalg.norm(c - r) / np.linalg.norm(r))


def test_a_permutation_the_sample_misses_is_decided_on_the_whole():
    r = randn(512, 256)  # 128 Ki values: sampled, not whole
    c = np.concatenate([r[:, 128:], r[:, :128]], axis=1)
    rows = set(grid(r.shape)[0].ravel().tolist())
    off = next(i for i in range(512) if i not in rows)
    assert only(explain(r, c, noise=1e-5, token_dim=0), "layout_permutation").evidence["permutation"] == "swapped_halves"
    c[off] += 1.0  # one row outside the sample breaks the permutation
    assert "layout_permutation" not in names(explain(r, c, noise=1e-5, token_dim=0))


def test_a_ratio_on_a_large_pair_allocates_no_full_size_temporaries():
    r = np.random.default_rng(0).standard_normal((2048, 4096), dtype=np.float32)  # 32 MiB
    c = r * np.float32(448)
    tracemalloc.start()
    found = explain(r, c, noise=1e-5, token_dim=0, head_dim=128)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert names(found) == ["constant_ratio"]
    assert peak < r.nbytes  # float64 copies of both would be 4x; a few 4 MiB blocks are ~0.6x


def test_finding_kinds_and_dict():
    assert set(KIND_OF.values()) == set(KINDS)
    f = Finding("row_ratio", "s", {"a": 1})
    assert f.kind == "ratio" and f.to_dict() == {"hypothesis": "row_ratio", "kind": "ratio", "summary": "s",
                                                 "evidence": {"a": 1}}
    assert Finding("weight_layout", "s").kind == "permutation"


def test_context_takes_dtype_names_and_torch_dtypes():
    torch = pytest.importorskip("torch")
    ctx = Context(ref_dtype=torch.bfloat16, cand_dtype=np.dtype("float16"))
    assert (ctx.ref_dtype, ctx.cand_dtype) == ("bfloat16", "float16")


@pytest.mark.parametrize("dtypes,noise", [(("float32", "bfloat16"), 2.0 ** -7 * 4), (("float16",), 2.0 ** -10 * 4),
                                          (("float32",), 1e-5), (("float8_e4m3fn", "float32"), 0.5),
                                          (("int64", None), 1e-5), (("float64",), 1e-12)])
def test_default_noise_is_four_eps_of_the_coarser_dtype(dtypes, noise):
    assert default_noise(*dtypes) == pytest.approx(noise)


@pytest.mark.parametrize("shape", [(40, 24), (3, 2, 300_000)])  # the second is walked with int prefixes
def test_one_pass_sums_equal_numpy(shape):
    from inkling_probe.compare.explain.stats import collect

    rng = np.random.default_rng(11)
    r = rng.standard_normal(shape).astype(np.float32)
    c = (r * 1.1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    c[(0,) * len(shape)] = np.nan  # masked on both sides
    st = collect(r, c, row_dim=0, chan_dim=len(shape) - 1)
    both = np.isfinite(c)
    r64, c64 = np.where(both, r.astype(np.float64), 0.0), np.where(both, c.astype(np.float64), 0.0)
    assert st.nonfinite and st.rr == pytest.approx((r64 ** 2).sum()) and st.rc == pytest.approx((r64 * c64).sum())
    for d, al in st.dims.items():
        other = tuple(i for i in range(len(shape)) if i != d)
        np.testing.assert_allclose(al.dd, ((c64 - r64) ** 2).sum(other), rtol=1e-9)
        np.testing.assert_allclose(al.rr, (r64 ** 2).sum(other), rtol=1e-9)
    np.testing.assert_allclose(st.dims[len(shape) - 1].sd, (c64 - r64).sum(tuple(range(len(shape) - 1))), rtol=1e-9, atol=1e-9)


def test_layout_helpers_work_on_numpy_and_torch():
    """replay permutes a module's torch parameters with the same helpers explain uses on numpy."""
    from inkling_probe.compare.explain.permute import concat_to_interleaved, interleaved_to_concat, swap_halves

    x = np.arange(8.0).reshape(8, 1)
    assert interleaved_to_concat(x, 0).ravel().tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert concat_to_interleaved(x, 0).ravel().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert swap_halves(x, 0).ravel().tolist() == [4, 5, 6, 7, 0, 1, 2, 3]
    torch = pytest.importorskip("torch")
    t = torch.arange(8.0).reshape(1, 8)
    assert interleaved_to_concat(t, 1).flatten().tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert isinstance(swap_halves(t, 1), torch.Tensor)

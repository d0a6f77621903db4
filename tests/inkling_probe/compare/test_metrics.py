"""Metrics against hand-computed answers, for every dtype, zero references and empty tensors."""
import math

import pytest
import torch

from inkling_probe.compare.metrics import compare_tensors
from inkling_probe.compare.values import as_float64, unpack_fp4


def test_hand_computed_values():
    r = torch.tensor([3.0, 4.0])
    c = torch.tensor([3.0, 5.0])
    m = compare_tensors(r, c, atol=0.5, rtol=0.0)
    assert m.rel_rms == pytest.approx(1 / 5)
    assert m.cosine == pytest.approx((9 + 20) / (5 * math.sqrt(34)))
    assert m.max_abs == 1.0 and m.max_abs_index == [1]
    assert m.sqnr_db == pytest.approx(10 * math.log10(25))
    assert m.outside == 0.5 and m.mismatch == 0.5


def test_max_abs_index_is_multidim_and_found_across_chunks(monkeypatch):
    import inkling_probe.compare.values as v
    monkeypatch.setattr(v, "CHUNK", 7)
    r = torch.zeros(5, 6)
    c = r.clone()
    c[4, 3] = -2.0
    c[0, 1] = 1.0
    m = compare_tensors(r, c)
    assert m.max_abs == 2.0 and m.max_abs_index == [4, 3]


def test_chunked_sums_equal_one_pass(monkeypatch):
    g = torch.Generator().manual_seed(0)
    r, c = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    whole = compare_tensors(r, c)
    import inkling_probe.compare.values as v
    monkeypatch.setattr(v, "CHUNK", 33)
    parts = compare_tensors(r, c)
    assert parts.rel_rms == pytest.approx(whole.rel_rms, rel=1e-12)
    assert parts.cosine == pytest.approx(whole.cosine, rel=1e-12)


def test_accumulates_in_float64_not_the_input_dtype():
    # 2**24 + 1 is not a float32; a float32 sum of many equal squares would lose the small difference
    r = torch.full((1 << 16,), 1.0, dtype=torch.float32)
    c = r.clone()
    c[0] = 1.0 + 2 ** -20
    m = compare_tensors(r, c)
    assert m.rel_rms == pytest.approx(2 ** -20 / math.sqrt(1 << 16), rel=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.float64])
def test_every_float_dtype(dtype):
    r = torch.tensor([1.0, 2.0, -4.0, 0.5]).to(dtype)
    c = torch.tensor([1.0, 2.0, -4.0, 1.0]).to(dtype)
    m = compare_tensors(r, c)
    assert m.rel_rms == pytest.approx(0.5 / math.sqrt(1 + 4 + 16 + 0.25))
    assert m.max_abs_index == [3]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool])
def test_ints_and_bools(dtype):
    r = torch.tensor([1, 0, 1, 1]).to(dtype)
    c = torch.tensor([1, 1, 1, 0]).to(dtype)
    m = compare_tensors(r, c)
    assert m.mismatch == 0.5
    assert m.max_abs == 1.0


def test_packed_fp4_compares_values():
    fp4 = torch.float4_e2m1fn_x2
    r = torch.tensor([[0x21]], dtype=torch.uint8)  # low nibble 1 -> 0.5, high nibble 2 -> 1.0
    assert unpack_fp4(r).tolist() == [[0.5, 1.0]]
    c = torch.tensor([[0x12]], dtype=torch.uint8)  # nibbles swapped: 1.0, 0.5
    m = compare_tensors(r.view(fp4), c.view(fp4))
    assert m.numel == 2 and m.max_abs == 0.5 and m.mismatch == 1.0
    assert as_float64(r.view(fp4)).shape == (1, 2)


def test_zero_reference():
    z = torch.zeros(4)
    same = compare_tensors(z, z)
    assert same.rel_rms == 0.0 and same.cosine == 1.0 and same.sqnr_db == math.inf
    off = compare_tensors(z, torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert off.rel_rms == math.inf and off.cosine == 0.0 and off.sqnr_db == -math.inf
    assert off.max_rel == math.inf and off.error("rel_rms") == math.inf


def test_empty_tensors():
    m = compare_tensors(torch.zeros(0, 8), torch.zeros(0, 8))
    assert m.numel == 0 and m.rel_rms == 0.0 and m.cosine == 1.0 and m.max_abs_index is None
    assert m.error("rel_rms") == 0.0


def test_nan_and_inf_counts_first_index_and_mismatch():
    r = torch.tensor([[1.0, 2.0], [float("nan"), 4.0]])
    c = torch.tensor([[1.0, float("inf")], [float("nan"), float("nan")]])
    m = compare_tensors(r, c)
    assert (m.ref_nan, m.ref_inf, m.cand_nan, m.cand_inf) == (1, 0, 2, 1)
    assert m.ref_first_nonfinite == [1, 0] and m.cand_first_nonfinite == [0, 1]
    assert m.nonfinite_mismatch == 2  # the shared NaN at [1, 0] agrees
    assert m.error("rel_rms") == math.inf and m.error("cosine") == math.inf
    # docs/COMPARE.md: a NaN/Inf disagreement makes every error metric inf, the fields included
    assert m.rel_rms == math.inf and m.max_abs == math.inf and m.max_rel == math.inf
    assert m.sqnr_db == -math.inf and math.isnan(m.cosine) and m.max_abs_index == [0, 1]


def test_a_candidate_nan_never_reads_as_agreement():
    r = torch.ones(10)
    c = r.clone()
    c[2] = float("nan")
    m = compare_tensors(r, c)
    assert m.rel_rms == math.inf and not m.cosine == 1.0 and m.max_abs_index == [2] and not m.exact
    both = compare_tensors(c, c.clone())  # the same NaN on both sides agrees
    assert both.rel_rms == 0.0 and both.cosine == 1.0 and both.exact


def test_nan_row_in_the_table_and_the_json(tmp_path):
    import json

    from click.testing import CliRunner

    from dumps import write
    from inkling_probe.cli import group

    x = torch.randn(4, 8)
    bad = x.clone()
    bad[1, 3] = float("nan")
    ref, cand = write(tmp_path / "r", [[("layers.0.h", x)]]), write(tmp_path / "c", [[("layers.0.h", bad)]])
    r = CliRunner().invoke(group, ["compare", ref, cand, "--json"])
    row = json.loads(r.output)["rows"][0]
    assert r.exit_code == 1 and row["diverged"]
    assert row["metrics"]["rel_rms"] is None and row["metrics"]["cosine"] is None  # inf/NaN -> null
    assert row["metrics"]["nonfinite_mismatch"] == 1 and row["metrics"]["cand_nan"] == 1
    table = CliRunner().invoke(group, ["compare", ref, cand], env={"COLUMNS": "200"}).output
    head = next(ln for ln in table.splitlines() if "rel_rms" in ln)
    line = next(ln for ln in table.splitlines() if "layers.0.h" in ln)
    cells = dict(zip([c.strip() for c in head.split("┃")], [c.strip() for c in line.split("│")]))
    assert cells["rel_rms"] == "inf" and cells["max_abs"] == "inf"


def test_identical_is_exact_and_shape_mismatch_raises():
    x = torch.randn(3, 4)
    assert compare_tensors(x, x.clone()).exact
    with pytest.raises(ValueError, match="shapes differ"):
        compare_tensors(x, torch.randn(3, 5))


def test_error_metrics():
    r, c = torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.1])
    m = compare_tensors(r, c, atol=0.05)
    assert m.error("rel_rms") == pytest.approx(0.1)
    assert m.error("max_abs") == pytest.approx(0.1) and m.error("max_rel") == pytest.approx(0.1)
    assert m.error("cosine") == pytest.approx(1 - 1 / math.sqrt(1.01))
    assert m.error("outside") == 0.5
    with pytest.raises(ValueError, match="unknown metric"):
        m.error("nope")


@pytest.mark.parametrize("shape, td", [((2048, 512), 0), ((1, 300, 6144), 1), ((900, 333), 0), ((3, 200000), 0)])
def test_one_pass_rows_equal_the_row_pass(shape, td):
    """compare_with_rows: the per-row sums of the metrics' own pass give the row errors the separate
    row pass gives, bit for bit (NaN and Inf where both sides hold them included); the metrics are
    compare_tensors' (bit for bit where the row width divides the chunk, within a few ulps else)."""
    import numpy as np

    from inkling_probe.compare.measure import errors_from_sums, row_errors_and_scale
    from inkling_probe.compare.metrics import CHUNK, compare_with_rows
    from inkling_probe.compare.values import Values

    rng = np.random.default_rng(0)
    r = rng.standard_normal(shape).astype(np.float32)
    c = (r + 1e-3 * rng.standard_normal(shape)).astype(np.float32)
    r.reshape(-1)[7] = c.reshape(-1)[7] = np.nan
    r.reshape(-1)[-3] = c.reshape(-1)[-3] = np.inf
    m, sums = compare_with_rows(r, c, 1e-4, 1e-3, td)
    assert sums is not None
    for a, b in zip(errors_from_sums(*sums), row_errors_and_scale(Values(r, "float32"), Values(c, "float32"), td)):
        assert np.array_equal(a, b)
    plain = compare_tensors(r, c, atol=1e-4, rtol=1e-3).to_dict()
    width = int(np.prod(shape[td + 1:]))
    for k, v in m.to_dict().items():
        if isinstance(v, float) and not (CHUNK % width == 0):
            assert v == pytest.approx(plain[k], rel=1e-14, nan_ok=True), k
        else:
            assert v == plain[k] or (v != v and plain[k] != plain[k]), k

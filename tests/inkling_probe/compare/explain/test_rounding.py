"""Rounding: the numpy emulation matches torch's casts bit for bit, and the hypothesis fires on a
rounded side only (not on noise of the same size, nor as a ratio, permutation or offset)."""
import numpy as np
import pytest

from inkling_probe.compare.explain import explain
from inkling_probe.compare.explain.formats import E4M3, FORMATS, round_to

from . import names, only, randn

NOISE_OF = {"bfloat16": 2.0 ** -9, "float16": 2.0 ** -12, "float8_e4m3fn": 2.0 ** -5}  # ~ rounding's rel_rms


def _hard_values() -> np.ndarray:
    """Ties, subnormals, the format edges, overflow and specials, as float32."""
    mids = (E4M3[1:] + E4M3[:-1]) / 2  # e4m3 ties
    edges = [0.0, -0.0, 1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 65504.0, 65519.0, 65520.0, 448.0, 460.0, 464.0,
             500.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -133, 3.3e38, 3.4e38, np.inf, -np.inf]
    rng = np.random.default_rng(0)
    x = np.concatenate([mids, -mids, edges, rng.standard_normal(4000) * 10.0 ** rng.uniform(-8, 5, 4000)])
    return x.astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_rounding_matches_torch_bit_for_bit(fmt):
    torch = pytest.importorskip("torch")
    x = _hard_values()
    want = torch.from_numpy(x).to(getattr(torch, fmt)).double().numpy()
    got = round_to(x.astype(np.float64), fmt)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_candidate_rounded_to_a_format(fmt):
    r = randn(64, 96) * 3
    found = explain(r, round_to(r, fmt), noise=1e-5, token_dim=0)
    assert names(found) == ["rounding"]  # not a ratio, permutation, offset or confinement
    f = found[0]
    assert (f.kind, f.evidence["format"], f.evidence["side"], f.evidence["declared"]) == ("rounding", fmt, "candidate", False)
    assert f.evidence["residual_rel_rms"] == 0.0


def test_reference_rounded_and_declared():
    c = randn(32, 64)
    f = only(explain(round_to(c, "bfloat16"), c, noise=1e-5, ref_dtype="bfloat16"), "rounding")
    assert (f.evidence["side"], f.evidence["declared"]) == ("reference", True) and "expected" in f.summary


@pytest.mark.parametrize("fmt", FORMATS)
def test_noise_the_size_of_rounding_is_not_rounding(fmt):
    r = randn(64, 96) * 3
    c = r * (1 + NOISE_OF[fmt] * randn(64, 96))  # as large as the format's rounding, not on its grid
    found = explain(r, c, noise=1e-5, token_dim=0)
    assert "rounding" not in names(found) and found == []


def test_rounding_plus_a_real_fault_is_not_rounding():
    r = randn(64, 96)
    c = round_to(r, "bfloat16")
    c[5] *= 1.5  # one token row off: the rounding is not the whole difference
    found = explain(r, c, noise=1e-5, token_dim=0)
    assert "rounding" not in names(found)

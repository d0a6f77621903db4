"""Per-row and per-channel ratios: each fires on its own factors, never on noise or a constant."""
import numpy as np
import pytest

from inkling_probe.compare.explain import explain

from . import names, only, randn


def test_row_ratio_names_each_rows_factor():
    r = randn(32, 64)
    s = np.random.default_rng(1).uniform(0.5, 2.0, 32)
    found = explain(r, r * s[:, None], noise=1e-5, token_dim=0)
    assert names(found)[0] == "row_ratio" and "constant_ratio" not in names(found)
    f = only(found, "row_ratio")
    assert f.kind == "ratio" and f.evidence["rows"] == list(range(32))
    assert f.evidence["factors"]["min"] == pytest.approx(s.min()) and f.evidence["factors"]["max"] == pytest.approx(s.max())
    assert "channel_ratio" not in names(found)


def test_a_row_normalised_twice_reads_as_factor_one_over_rms():
    r = randn(16, 128) * np.geomspace(0.1, 10, 16)[:, None]  # rows of very different scale
    c = r / np.sqrt((r * r).mean(axis=1, keepdims=True))  # the candidate normalised each row again
    f = only(explain(r, c, noise=1e-5, token_dim=0), "row_ratio")
    assert f.evidence["power_of_row_rms"] == pytest.approx(-1.0, abs=1e-3)


def test_rows_scaled_on_a_later_token_dim():
    r = randn(2, 12, 32)  # [B, T, H]
    s = np.random.default_rng(2).uniform(0.5, 2.0, 12)
    f = only(explain(r, r * s[None, :, None], noise=1e-5, token_dim=1), "row_ratio")
    assert f.evidence["dim"] == 1 and f.evidence["factors"]["median"] == pytest.approx(np.median(s))


def test_rows_with_their_own_noise_level_are_not_a_row_ratio():
    r = randn(32, 64)
    c = r + randn(32, 64) * np.random.default_rng(3).uniform(0.01, 0.3, (32, 1))
    assert not {"row_ratio", "channel_ratio", "constant_ratio"} & set(names(explain(r, c, noise=0.01, token_dim=0)))


def test_norm_weight_not_applied_reads_as_one_over_w():
    x = randn(64, 96)
    w = np.random.default_rng(4).uniform(0.5, 1.5, 96)
    f = only(explain(x * w, x, noise=1e-5, token_dim=0), "channel_ratio")  # the reference applied w
    assert f.kind == "ratio" and f.evidence["channels"] == list(range(96))
    reading = f.evidence["readings"][0]
    assert reading["factor_is"] == "1/w" and reading["w"]["median"] == pytest.approx(np.median(w))
    assert "row_ratio" not in names(explain(x * w, x, noise=1e-5, token_dim=0))


def test_w_applied_where_the_model_uses_one_plus_w():
    x = randn(64, 96)
    w = 0.1 * randn(96, rng=np.random.default_rng(5))  # Gemma-style weight: the model uses 1 + w
    f = only(explain(x * (1 + w), x * w, noise=1e-5, token_dim=0), "channel_ratio")
    assert [r["factor_is"] for r in f.evidence["readings"]] == ["w/(1+w)"]
    assert f.evidence["readings"][0]["w"]["median"] == pytest.approx(np.median(w))


def test_channels_with_their_own_noise_are_not_a_channel_ratio():
    r = randn(64, 96)
    c = r + randn(64, 96) * np.random.default_rng(6).uniform(0.01, 0.3, 96)
    assert "channel_ratio" not in names(explain(r, c, noise=0.01, token_dim=0))


def test_rows_too_short_to_fit_are_not_a_ratio():
    r = randn(64, 1)  # one value per row: any noise would fit a factor per row exactly
    c = r + 0.1 * randn(64, 1)
    assert "row_ratio" not in names(explain(r, c, noise=0.01, token_dim=0))


def _bf16(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float().numpy()


def test_a_span_of_rows_scaled_in_bf16_names_those_rows():
    """Rows 10..29 x1.1 in bf16: each factor is fitted on 64 values, so its noise is 1/8 of one
    value's; the rows are named (it read 'rows [] (0 of 80)': a margin of one value's noise)."""
    r = randn(80, 64)
    c = r.copy()
    c[10:30] *= 1.1
    found = explain(_bf16(r), _bf16(c), ref_dtype="bfloat16", cand_dtype="bfloat16", token_dim=0)
    f = only(found, "row_ratio")
    assert f.evidence["rows"] == list(range(10, 30)) and "rows [10, 11," in f.summary and "(20 of 80)" in f.summary
    assert "channel_ratio" not in names(found)


def test_most_rows_scaled_is_not_read_as_a_norm_weight():
    """Rows 0..69 of 80 x1.1: every channel's factor is ~1.09, so a per-channel reading fits too; the
    per-row one leaves the smaller residual and is the one said (it also said 'a norm weight not applied')."""
    r = randn(80, 4, 16, rng=np.random.default_rng(24))  # a draw where both readings fit (both were said)
    c = r.copy()
    c[:70] *= 1.1
    found = explain(_bf16(r), _bf16(c), ref_dtype="bfloat16", cand_dtype="bfloat16", token_dim=0)
    assert "channel_ratio" not in names(found) and not any("norm weight" in f.summary for f in found)
    assert only(found, "row_ratio").evidence["rows"] == list(range(70))


def test_factors_all_within_their_noise_claim_nothing():
    r = randn(80, 64)
    found = explain(r, r * (1 + 1e-7 * randn(80, 1, rng=np.random.default_rng(6))), noise=1e-4, token_dim=0)
    assert not {"row_ratio", "channel_ratio"} & set(names(found)) and not any("[] (0 of" in f.summary for f in found)

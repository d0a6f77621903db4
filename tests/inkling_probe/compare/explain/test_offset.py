"""Per-channel offset: a dropped bias is named with its offsets; noise and per-row offsets are not."""
import numpy as np
import pytest

from inkling_probe.compare.explain import explain

from . import names, only, randn


def test_dropped_bias_is_a_per_channel_offset():
    r = randn(48, 80)
    b = 0.5 * randn(80, rng=np.random.default_rng(7))
    f = only(explain(r + b, r, noise=1e-5, token_dim=0), "channel_offset")  # the candidate dropped b
    assert f.kind == "offset" and f.evidence["channels"] == list(range(80)) and not f.evidence["constant"]
    assert f.evidence["offsets"]["median"] == pytest.approx(-np.median(b))
    assert names(explain(r + b, r, noise=1e-5, token_dim=0)) == ["channel_offset"]


def test_one_offset_on_every_channel_says_so():
    r = randn(48, 80)
    f = only(explain(r, r + 0.25, noise=1e-5, token_dim=0), "channel_offset")
    assert f.evidence["constant"] and "one offset 0.25" in f.summary


def test_an_offset_on_a_few_channels_names_them():
    r = randn(48, 80)
    c = r.copy()
    c[:, [3, 40]] += 0.7
    f = only(explain(r, c, noise=1e-5, token_dim=0), "channel_offset")
    assert f.evidence["channels"] == [3, 40]


def test_noise_and_per_row_offsets_are_not_a_channel_offset():
    r = randn(48, 80)
    assert "channel_offset" not in names(explain(r, r + 0.05 * randn(48, 80), noise=0.01, token_dim=0))
    per_row = r + randn(48, 1, rng=np.random.default_rng(8))  # one offset per token row, not per channel
    assert "channel_offset" not in names(explain(r, per_row, noise=0.01, token_dim=0))

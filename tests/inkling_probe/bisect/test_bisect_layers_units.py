import math

from inkling_probe.bisect.layers import bound, units


def test_outer_keys_fold_into_the_first_and_last_layer():
    keys = ["embed", "layers.0.attn_norm", "layers.0.resid", "layers.1.resid", "layers.10.resid", "norm", "logits"]
    us = units(keys)
    assert [u["name"] for u in us] == ["layers.0", "layers.1", "layers.10"]
    assert us[0]["globs"] == ["embed", "layers.0.*"] and us[-1]["globs"] == ["layers.10.*", "norm", "logits"]


def test_search_fits_the_promised_bound():
    for n in range(1, 130):
        assert 1 + math.ceil(math.log2(n + 1)) <= bound(n)  # stats run + binary search over n + 1 outcomes

"""explain's renormalised_rows: rows scaled to unit rms are named from the numbers alone."""
import numpy as np

from inkling_probe.compare.explain import explain


def _pair(scale_rows=None, renorm_rows=(3, 4, 5), seed=0):
    g = np.random.default_rng(seed)
    r = g.standard_normal((12, 64)) * 2.0  # rows of rms ~2 (an RMSNorm with weight ~2 made them)
    c = r.copy()
    for t in renorm_rows:
        c[t] = r[t] / np.sqrt((r[t] ** 2).mean())
    for t in scale_rows or ():
        c[t] = r[t] * 0.5
    return r.astype(np.float32), c.astype(np.float32)


def test_renormalised_rows_named_with_their_evidence():
    r, c = _pair()
    found = {f.name: f for f in explain(r, c, noise=1e-5)}
    f = found["renormalised_rows"]
    assert f.evidence["rows"] == [3, 4, 5] and "each row scaled to unit rms" in f.summary
    assert all(abs(x - 1) < 1e-5 for x in f.evidence["cand_row_rms"])
    assert all(x > 1.5 for x in f.evidence["ref_row_rms"])


def test_a_row_scale_that_is_not_unit_rms_is_not_a_renorm():
    r, c = _pair(scale_rows=(3, 4, 5), renorm_rows=())
    assert "renormalised_rows" not in {f.name for f in explain(r, c, noise=1e-5)}


def test_renorm_plus_another_error_is_not_claimed():
    r, c = _pair()
    c[8] += 0.3  # an unrelated error on a text row: the residual after undoing the re-norm is not noise
    assert "renormalised_rows" not in {f.name for f in explain(r, c, noise=1e-5)}

"""NVFP4 flushed blocks: named only where quiet 16-blocks are zero in the candidate; no zero blocks
(or loud ones zeroed), no flushed story."""
import numpy as np
import pytest

from inkling_probe.compare.explain import explain

from . import names, only, randn


def _blocky(t=32, h=128, seed=9):
    """[T, H] values whose 16-blocks span 8 octaves of amplitude (as activations around outliers do)."""
    rng = np.random.default_rng(seed)
    scale = 2.0 ** rng.uniform(-8, 0, (t, h // 16, 1))
    return (rng.standard_normal((t, h // 16, 16)) * scale).reshape(t, h)


def test_quiet_blocks_flushed_to_zero():
    r = _blocky()
    blocks = r.reshape(-1, 16)
    quiet = np.abs(blocks).max(1) < 2.0 ** -5  # an underflowing block scale flushes these
    c = (blocks * (1 + 0.002 * randn(*blocks.shape)) * ~quiet[:, None]).reshape(r.shape)
    f = only(explain(r, c, noise=1e-3, token_dim=0), "flushed")
    assert f.kind == "flushed" and f.evidence["blocks_flushed"] == quiet.sum() and f.evidence["surviving_quieter"] == 0
    assert f.evidence["loudest_flushed_amax"] < 2.0 ** -5


def test_raw_amax_input_scale_flushes_nvfp4_blocks():
    torch = pytest.importorskip("torch")
    from inkling_model import nvfp4

    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 64, generator=g)
    amax = torch.cat([x, 140 * torch.randn(1, 64, generator=torch.Generator().manual_seed(5))]).abs().max()
    good, raw = nvfp4.fake_quant(x, nvfp4.global_scale(amax)), nvfp4.fake_quant(x, amax)  # raw: the bug
    f = only(explain(good.numpy(), raw.numpy(), noise=0.1, token_dim=0), "flushed")
    assert f.evidence["blocks_flushed"] > 0 and f.evidence["surviving_quieter"] == 0


def test_no_flushed_story_without_zero_blocks():
    """The GEMM output of a flushed input lost energy but holds no zero block: nothing says 'flushed'."""
    torch = pytest.importorskip("torch")
    from inkling_model import nvfp4

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=g), torch.randn(64, 64, generator=g) / 8  # [T, K], [N, K]
    amax = torch.cat([x, 140 * torch.randn(1, 64, generator=torch.Generator().manual_seed(5))]).abs().max()
    x_raw = nvfp4.fake_quant(x, amax)  # the raw amax as input_scale: most blocks flush
    assert 0.5 < float((x_raw == 0).float().mean()) < 0.9
    ref, cand = nvfp4.fake_quant(x, nvfp4.global_scale(amax)) @ w.T, x_raw @ w.T
    found = explain(ref.numpy(), cand.numpy(), noise=0.1, token_dim=0)
    assert not {"flushed", "zeroed", "constant_ratio"} & set(names(found))


def test_loud_rows_zeroed_are_zeroed_not_flushed():
    r = _blocky()
    loud = np.argsort(-np.abs(r).max(1))[:2]
    c = r.copy()
    c[loud] = 0
    found = explain(r, c, noise=1e-3, token_dim=0)
    assert only(found, "zeroed").evidence["rows"] == sorted(loud.tolist()) and "flushed" not in names(found)


def test_blocks_zeroed_whatever_their_level_are_not_flushed():
    r = _blocky()
    blocks = r.reshape(-1, 16).copy()
    blocks[np.random.default_rng(10).random(len(blocks)) < 0.3] = 0  # a third of the blocks, loud or quiet
    found = explain(r, blocks.reshape(r.shape), noise=1e-3, token_dim=0)
    assert "zeroed" in names(found) and "flushed" not in names(found)

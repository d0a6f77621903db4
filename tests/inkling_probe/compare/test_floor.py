"""Allowances from a control (compare/floor.py, measure.py): the candidate's error and the control's
floor are measured on the rows each judged, on one scale, and a row's allowance comes from the
control's distribution over rows and the rounding of the key's dtype, never from one row that
happens to read exact."""
import numpy as np
import pytest
import torch

from inkling_probe.compare import compare, floor

from dumps import write

T, H = 16, 64
META = {"kind": "decision", "scores": "layers.2.mlp.router_logits"}


def _rel_noise(h, level, seed, rows=None):
    """h with noise of exactly ``level`` relative rms on every row (or on ``rows``)."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randn(h.shape, generator=g)
    n = n / n.pow(2).mean(-1, keepdim=True).sqrt() * h.pow(2).mean(-1, keepdim=True).sqrt() * level
    out = h + n
    if rows is not None:
        keep = torch.ones(h.shape[0], dtype=torch.bool)
        keep[list(rows)] = False
        out[keep] = h[keep]
    return out


def _tied_logits(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, 6, generator=g)
    for t in range(T):  # every token's 2nd and 3rd experts 5e-4 apart: any of them may flip
        o = torch.argsort(logits[t], descending=True)
        logits[t, o[2]] = logits[t, o[1]] - 5e-4
    return logits


def _flip_at(logits, t):
    nudged = logits.clone()
    o = torch.argsort(logits[t], descending=True)
    nudged[t, o[2]] += 1e-3
    nudged[t, o[1]] -= 1e-3
    return nudged


def _run(logits, out):
    return [("layers.1.out", torch.ones(T, H)), ("layers.2.mlp.router_logits", logits),
            ("layers.2.mlp.topk_idx", torch.topk(logits, 2, dim=-1).indices, META), ("layers.2.mlp.experts", out)]


def test_candidate_and_control_setting_aside_different_rows_are_measured_on_one_scale(tmp_path):
    """The seed-3 hunt's mechanism: the control flips at token 1 (rows 1.. set aside), the benign
    candidate at token 5 (rows 5.. set aside); both carry the same per-row noise. Measured over all
    rows, the floor was diluted 16x and the error 3x: flagged. Over the rows each judged: 1x."""
    logits = _tied_logits(0)
    h = torch.randn(T, H, generator=torch.Generator().manual_seed(1))
    ref = write(tmp_path / "r", [_run(logits, h)])
    ctl = write(tmp_path / "k", [_run(_flip_at(logits, 1), _rel_noise(h, 0.01, 2))])
    cand = write(tmp_path / "c", [_run(_flip_at(logits, 5), _rel_noise(h, 0.01, 3))])
    rep = compare(ref, cand, control=ctl)
    row = rep.row("layers.2.mlp.experts")
    # only each side's flipped row is set aside (the rows after it stay judged, compare/reach.py)
    assert row.metrics.extra["rows_judged"] == 15 and row.error == pytest.approx(0.01, rel=1e-3)
    assert row.floor == pytest.approx(0.01, rel=1e-3)  # the control's 15 rows, not diluted by its set-aside one
    assert not rep.diverged, (row.error, row.floor, row.row_score)
    # the same rows 0-4 off by 5% are found
    bad = write(tmp_path / "b", [_run(_flip_at(logits, 5), _rel_noise(h, 0.05, 3))])
    assert compare(ref, bad, control=ctl).culprit.key == "layers.2.mlp.experts"


def test_a_control_row_that_happens_to_be_exact_does_not_zero_its_allowance(tmp_path):
    """A loud row (10x the others' norm, as token 0 often is) that the control leaves bit-identical:
    its allowance comes from the control's distribution over rows and bf16's rounding on that row's
    own scale. A 10% fault on that row is still found."""
    h = torch.randn(T, H, generator=torch.Generator().manual_seed(4))
    h[0] *= 10
    ref = write(tmp_path / "r", [[("layers.1.mlp_norm", h.bfloat16())]])
    ctl = write(tmp_path / "k", [[("layers.1.mlp_norm", _rel_noise(h, 0.003, 5, rows=range(4, T)).bfloat16())]])
    cand = write(tmp_path / "c", [[("layers.1.mlp_norm", _rel_noise(h, 0.003, 6).bfloat16())]])
    rep = compare(ref, cand, control=ctl)
    row = rep.row("layers.1.mlp_norm")
    assert not rep.diverged, (row.error, row.threshold, row.row_score, row.bad_rows)
    bad = h.clone()
    bad[0] *= 1.1
    rep = compare(ref, write(tmp_path / "b", [[("layers.1.mlp_norm", _rel_noise(bad, 0.003, 6).bfloat16())]]), control=ctl)
    assert rep.culprit.key == "layers.1.mlp_norm" and rep.culprit.bad_rows == [0]


def test_row_allowance_rules():
    e_ctl = np.array([0.0, 0.02, 0.02, 0.0])
    rho = np.array([4.0, 1.0, 1.0, 1.0])
    allow = floor.row_allowance(4, base=0.01, k=2, k_row=3, ctl_rows=e_ctl, ctl_masked=[3], minimum=0.0045,
                                rounding=0.0045, scale=rho)
    # rows 1, 2: their own control error; rows 0 (exact) and 3 (set aside): the control's distribution
    # (0.02 relative) on their own scale; row 0 is 4x an average row
    assert allow[1] == allow[2] == pytest.approx(3 * 0.02)
    assert allow[3] == pytest.approx(3 * 0.02) and allow[0] == pytest.approx(3 * 0.02 * 4)
    none = floor.row_allowance(4, base=0.01, k=2, k_row=3, rounding=0.0045, scale=rho)
    assert none.tolist() == pytest.approx([3 * 0.0045 * 4, 0.03, 0.03, 0.03])
    exact = floor.row_allowance(2, base=0.01, k=2, k_row=3, ctl_rows=np.zeros(2), minimum=0.0045)
    assert (exact > 0).all()  # a control exact everywhere: the key's allowance, never 0


def test_an_fp32_tensor_of_bf16_inputs_is_not_judged_below_bf16_rounding(tmp_path):
    """Mixtral's decode-step miss: 2 fp32 router weights softmaxed from bf16 logits; the control's
    error there (a sample of 2 values) was 8x below the candidate's, both bf16 rounding carried into
    fp32. The minimum allowance takes the precision the inputs ran in, not only the key's dtype."""
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(0))
    w = torch.tensor([[0.6, 0.4]])
    ref = write(tmp_path / "r", [[("layers.0.h", x), ("layers.0.w", w)]])
    ctl = write(tmp_path / "k", [[("layers.0.h", x.bfloat16()), ("layers.0.w", w * (1 + 5e-4))]])
    cand = write(tmp_path / "c", [[("layers.0.h", x.bfloat16()), ("layers.0.w", w * torch.tensor([[1.003, 0.996]]))]])
    row = compare(ref, cand, control=ctl).row("layers.0.w")
    assert row.ref_dtype == row.cand_dtype == "float32"
    assert row.threshold >= 2 * 2 ** -8 / 3 ** 0.5 and not row.diverged, (row.error, row.floor, row.threshold)
    # an fp32 tensor of fp32 inputs keeps the fp32 minimum: the same change is found there
    ref32 = write(tmp_path / "r32", [[("layers.0.h", x), ("layers.0.w", w)]])
    ctl32 = write(tmp_path / "k32", [[("layers.0.h", x * (1 + 1e-7)), ("layers.0.w", w * (1 + 5e-4))]])
    cand32 = write(tmp_path / "c32", [[("layers.0.h", x * (1 + 1e-7)), ("layers.0.w", w * torch.tensor([[1.003, 0.996]]))]])
    assert compare(ref32, cand32, control=ctl32).row("layers.0.w").diverged

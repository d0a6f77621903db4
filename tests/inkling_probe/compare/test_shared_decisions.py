"""Rows set aside after a changed decision that the control changed the same way are judged against
the control's own error there (compare/shared_decisions.py): a correct run as its own control leaves
nothing unchecked (issue 41: seed 3's NVFP4 TP=1 run against transformers' fp32, with itself as the
control, exited 1 "could not check 8 row(s)"), and a fault on those rows still shows."""
import numpy as np
import pytest
import torch

from inkling_probe.compare import compare

from dumps import write

T, W = 8, 16
FLIPPED = [2, 3, 5]  # 3 of 8 tokens flip (near-ties): over coverage.FAULT_ROWS, so set aside they'd be unchecked


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rows(seed):
    x = _rand(T, W, seed=seed).double()
    return (x / x.norm(dim=1, keepdim=True)).float()  # [T, W] rows of norm 1


def _step(lg, ids, experts, out):
    meta = {"kind": "decision", "scores": "layers.1.mlp.router_logits"}
    return [[("layers.1.mlp.router_logits", lg), ("layers.1.mlp.topk_idx", ids, meta),
             ("layers.1.mlp.experts", experts), ("layers.2.mlp.out", out)]]


def _moved(x, rows, rel, seed):
    """``x`` with ``rows`` moved by ``rel`` of their norm (a random direction) and 1e-3 noise on all."""
    x = x.clone().double() + 1e-3 * _rand(*x.shape, seed=seed + 100).double() / np.sqrt(W)
    for i, t in enumerate(rows):
        d = _rand(W, seed=seed + i).double()
        x[t] += rel * d / d.norm()
    return x.float()


def _dumps(tmp_path, ctl_ids="same", fault=1.0):
    """Reference, control and candidate: both others flip FLIPPED (near-ties) to expert 2; the
    control's own ids are the candidate's (``same``) or expert 3 for the flipped (``other``).
    The flipped rows are off by 0.5 in both (what the flip does); ``fault`` scales the candidate's."""
    lg = _rand(T, 6, seed=3)
    lg[:, 0], lg[:, 1], lg[:, 2], lg[:, 3] = 3.0, 2.0, 2.0 - 2e-6, 1.0
    ref_ids = torch.topk(lg, 2, dim=-1).indices
    moved = lg.clone()
    moved[FLIPPED, 2] = 2.0 + 2e-6  # a near-tie: expert 2 over expert 1
    ids = torch.topk(moved, 2, dim=-1).indices
    ctl_lg, ctl_i = moved.clone(), ids.clone()
    if ctl_ids == "other":
        ctl_lg[FLIPPED, 3] = 2.0 + 4e-6
        ctl_i = torch.topk(ctl_lg, 2, dim=-1).indices
    ex, out = _rows(1), _rows(2)
    ref = write(tmp_path / "r", _step(lg, ref_ids, ex, out))
    ctl = write(tmp_path / "k", _step(ctl_lg, ctl_i, _moved(ex, FLIPPED, 0.5, 10), _moved(out, FLIPPED, 0.5, 20)))
    cand = write(tmp_path / "c", _step(moved, ids, _moved(ex, FLIPPED, 0.5 * fault, 10),
                                       _moved(out, FLIPPED, 0.5 * fault, 20)))
    return ref, cand, ctl


def test_the_same_decisions_on_both_sides_leave_the_flipped_rows_judged(tmp_path):
    ref, cand, ctl = _dumps(tmp_path)
    rep = compare(ref, cand, control=ctl, explain=False)
    row = rep.row("layers.2.mlp.out")
    assert row.rows_judged == T and row.not_judged == {} and "judged against the control's own" in row.note
    assert not rep.diverged and not rep.unchecked, rep.unchecked_reason


@pytest.mark.parametrize("fault, diverged", [(1.0, False), (6.0, True)])
def test_a_fault_on_the_shared_rows_shows(tmp_path, fault, diverged):
    """The candidate's flipped rows 6x as far off as the control's: diverged, those rows named."""
    ref, cand, ctl = _dumps(tmp_path, fault=fault)
    rep = compare(ref, cand, control=ctl, explain=False)
    row = rep.row("layers.2.mlp.out")
    assert row.diverged is diverged
    if diverged:
        assert set(row.bad_rows) == set(FLIPPED)


def test_other_decisions_on_the_control_leave_the_rows_set_aside_and_unchecked(tmp_path):
    ref, cand, ctl = _dumps(tmp_path, ctl_ids="other")
    rep = compare(ref, cand, control=ctl, explain=False)
    row = rep.row("layers.2.mlp.out")
    assert row.not_judged == {"set aside": len(FLIPPED)} and row.status == "unchecked"
    assert rep.unchecked and not rep.diverged

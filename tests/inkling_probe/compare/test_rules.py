"""The rules of compare/divergence.py pinned: each constant gets a pair of cases on either side of it
(pure rows, so the margins are exact; the values are the documented ones, written out, so a changed
constant fails them), and the routing-decision rules are tested on rows that are
decisions (recorded with ``kind="decision"`` and their router scores, through compare)."""
import pytest
import torch

from inkling_probe.compare import compare, divergence
from inkling_probe.compare.report import Row

from dumps import write


def _rows(*spec) -> list[Row]:
    """Rows from (key, score): one layer per key unless the key says otherwise; > 1 diverged."""
    out = []
    for key, score in spec:
        layer = int(key.split(".")[1]) if key.startswith("layers.") else None
        out.append(Row(key, 0, layer=layer, score=score, status="diverged" if score > 1 else "ok"))
    return out


def _culprits(*spec) -> list[str]:
    rows = _rows(*spec)
    divergence.attribute(rows)
    return [r.key for r in divergence.culprits(rows)]


# --- INDEPENDENT: a diverged row with tainted inputs is a second culprit from a jump of 8 on -----------
@pytest.mark.parametrize("jump, second", [(8.2, True), (7.8, False)])
def test_independent_jump_pair(jump, second):
    got = _culprits(("layers.1.a", 10.0), ("layers.2.b", 10.0 * jump))
    assert got == (["layers.1.a", "layers.2.b"] if second else ["layers.1.a"])


# --- DECAY: an upstream error that persists at half its allowance still explains what follows ----------
@pytest.mark.parametrize("middle, tainted", [(0.55, True), (0.45, False)])
def test_decay_pair(middle, tainted):
    got = _culprits(("layers.1.a", 5.0), ("layers.2.b", middle), ("layers.3.c", 2.0))
    assert got == (["layers.1.a"] if tainted else ["layers.1.a", "layers.3.c"])


# --- ORIGIN_MIN and RISE: a sub-allowance birth needs 0.75 of its allowance and 3x its inputs ---------
@pytest.mark.parametrize("origin, birth", [(0.76, True), (0.74, False)])
def test_origin_min_pair(origin, birth):
    got = _culprits(("layers.0.x", 0.1), ("layers.1.a", origin), ("layers.2.b", 2.0))
    assert got == (["layers.1.a"] if birth else ["layers.2.b"])
    if birth:
        rows = _rows(("layers.0.x", 0.1), ("layers.1.a", origin), ("layers.2.b", 2.0))
        divergence.attribute(rows)
        assert rows[1].born == "below_allowance" and divergence.first_divergence(rows).key == "layers.2.b"


@pytest.mark.parametrize("rise, birth", [(3.1, True), (2.9, False)])
def test_rise_pair(rise, birth):
    got = _culprits(("layers.0.x", 0.9 / rise), ("layers.1.a", 0.9), ("layers.2.b", 2.0))
    assert got == (["layers.1.a"] if birth else ["layers.2.b"])


def test_structural_feeders_are_the_layer_so_far_and_the_last_row_before():
    rows = _rows(("layers.0.x", 0.1), ("layers.0.y", 0.2), ("layers.1.a", 0.3), ("layers.1.b", 0.1))
    divergence.attribute(rows)
    assert rows[2].feeders == ["layers.0.y"] and rows[3].feeders == ["layers.1.a", "layers.0.y"]
    assert rows[3].score_in == 0.3


# --- routing decisions, on rows that are decisions ---------------------------------------------------
G = torch.Generator().manual_seed(11)
META = {"kind": "decision", "scores": "layers.2.mlp.router_logits"}


def _layer2(ids, logits, out, norm):
    return [("layers.1.out", torch.ones(8, 16)), ("layers.2.mlp_norm", norm), ("layers.2.mlp.router_logits", logits),
            ("layers.2.mlp.topk_idx", ids, META), ("layers.2.mlp.experts", out)]


def _clear_flip(ids, logits, t=3):
    """ids with token ``t`` routed to its worst expert instead of its best: against its scores."""
    bad = ids.clone()
    bad[t, 0] = int(torch.argmin(logits[t]))
    return bad


def test_a_clear_flip_on_clean_inputs_is_the_culprit_and_on_diverged_inputs_a_consequence(tmp_path):
    logits, norm, out = torch.randn(8, 6, generator=G), torch.randn(8, 16, generator=G), torch.randn(8, 16, generator=G)
    ids = torch.topk(logits, 2, dim=-1).indices
    ref = write(tmp_path / "r", [_layer2(ids, logits, out, norm)])
    clean = write(tmp_path / "c", [_layer2(_clear_flip(ids, logits), logits, out, norm)])
    rep = compare(ref, clean, threshold=1e-3)
    row = rep.row("layers.2.mlp.topk_idx")
    assert row.decision and row.clear_flips == 1 and row.born == "clean_inputs"
    assert [c.key for c in rep.culprits] == ["layers.2.mlp.topk_idx"]
    # the same clear flip after the layer's norm diverged (x3): the flip is that error's consequence,
    # however large its own score (a decision's error is inf against an allowance of 0)
    dirty = write(tmp_path / "d", [_layer2(_clear_flip(ids, logits), logits * 3, out, norm * 3)])
    rep = compare(ref, dirty)  # no --threshold: a clear flip is allowed 0 (score inf)
    row = rep.row("layers.2.mlp.topk_idx")
    assert row.decision and row.diverged and row.clear_flips == 1 and row.jump >= divergence.INDEPENDENT
    assert row.born == "" and [c.key for c in rep.culprits] == ["layers.2.mlp_norm"]


def test_a_decision_still_diverged_by_earlier_steps_flips_is_not_born_again(tmp_path):
    """The changed-token fraction counts over the steps so far: step 1 holds no new flip and stays
    diverged on step 0's; only step 0 is a culprit."""
    logits, norm, out = torch.randn(8, 6, generator=G), torch.randn(8, 16, generator=G), torch.randn(8, 16, generator=G)
    ids = torch.topk(logits, 2, dim=-1).indices
    ref = write(tmp_path / "r", [_layer2(ids, logits, out, norm)] * 2)
    cand = write(tmp_path / "c", [_layer2(_clear_flip(ids, logits), logits, out, norm), _layer2(ids, logits, out, norm)])
    rep = compare(ref, cand, threshold=1e-3)
    step1 = rep.row("layers.2.mlp.topk_idx", step=1)
    # step 1 reads step 0 through the cache (decode steps link their feeders): its score comes in
    assert step1.decision and step1.diverged and step1.clear_flips == 0 and step1.score_in > 1
    assert [(c.key, c.step) for c in rep.culprits] == [("layers.2.mlp.topk_idx", 0)]


def test_ids_in_another_order_change_no_token_and_leave_every_row_judged(tmp_path):
    """A token's decision is the set of its experts: ids in another order change nothing, so nothing
    after them is set aside, and a fault on one token's expert output is still found."""
    logits, norm, out = torch.randn(8, 6, generator=G), torch.randn(8, 16, generator=G), torch.randn(8, 16, generator=G)
    ids = torch.topk(logits, 2, dim=-1).indices
    ref = write(tmp_path / "r", [_layer2(ids, logits, out, norm)])
    bad = out.clone()
    bad[5] *= 1.5
    cand = write(tmp_path / "c", [_layer2(ids.flip(-1), logits, bad, norm)])
    rep = compare(ref, cand, threshold=1e-3)
    row = rep.row("layers.2.mlp.topk_idx")
    assert row.error == 0 and "routed differently" not in row.note and "set aside" not in rep.row("layers.2.mlp.experts").note
    assert rep.culprit.key == "layers.2.mlp.experts" and rep.culprit.bad_rows == [5]

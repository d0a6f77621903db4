"""Rows in dispatch order (per-expert calls, [T*k] slots) after a routing change are paired by
(token, expert) through the recorded decision (compare/experts.py), not left unchecked."""
import numpy as np
import pytest

from inkling_probe.compare import compare, experts

from dumps import write

from .flow_toy import run

TOKENS = [(7 * i + 3) % 40 for i in range(32)]
NOISE = 2e-7


def _pair(tmp_path, ref_layout, cand_layout, **cand_kw):
    a = write(tmp_path / "ref", run(TOKENS, tie=(1, 5), dispatch=ref_layout))
    b = write(tmp_path / "cand", run(TOKENS, tie=(1, 5), flip=True, noise=NOISE, dispatch=cand_layout, **cand_kw))
    return a, b


@pytest.mark.parametrize("ref_layout,cand_layout", [("loop", "loop"), ("flat", "flat"), ("loop", "flat")])
def test_a_benign_flip_leaves_expert_rows_judged_by_slot(tmp_path, ref_layout, cand_layout):
    a, b = _pair(tmp_path, ref_layout, cand_layout)
    rep = compare(a, b, explain=False)
    assert "near-tie" in rep.row("layers.1.mlp.topk_idx").note
    assert not rep.diverged and not rep.unchecked, rep.unchecked_reason
    rows = [r for r in rep.rows if r.key == "layers.1.mlp.experts.act_in"]
    assert all(r.status in ("ok", "exact") for r in rows)
    judged, recorded = sum(r.rows_judged for r in rows), sum(r.rows_recorded for r in rows)
    assert recorded == 64 and 60 <= judged < 64  # the flipped token's 2 slots set aside, the rest judged


@pytest.mark.parametrize("layout", ["loop", "flat"])
def test_a_fault_inside_one_expert_after_a_flip_is_found(tmp_path, layout):
    a, b = _pair(tmp_path, layout, layout, expert_fault=(1, 3, 1.5))
    rep = compare(a, b, explain=False)
    assert rep.diverged and rep.culprit.key == "layers.1.mlp.experts.act_in", [
        (r.key, r.call, r.score) for r in rep.rows if r.diverged][:5]


def test_rows_that_do_not_follow_from_the_ids_stay_not_comparable():
    ids = np.array([[0, 1], [1, 2], [0, 2]])
    assert experts.plan(ids, ids, [2, 2, 2], [3, 3], 0, set()) is None  # the other side: 2 calls of 3 rows
    assert experts.plan(ids, ids, [5], [6], 0, set()) is None  # one call, not T*k rows
    pl = experts.plan(ids, np.array([[0, 1], [1, 2], [0, 1]]), [2, 2, 2], [2, 3, 1], 2, {2})
    # expert 2 (call 2): token 1 on both sides (the other's call 2, row 0); token 2 moved, and set aside
    assert pl is not None and pl.recorded == 2 and pl.aside == 1
    name, ref_rows, other, tokens = pl.pairings[0]
    assert ref_rows.tolist() == [0] and other.tolist() == [[2, 0]] and tokens.tolist() == [1]
    assert (pl.key_recorded, pl.key_aside) == (6, 2)  # token 2's two slots

"""Every rule of compare pinned by a pair of cases on either side of its value (issue 41, item 7).

Each case is a small synthetic dump pair, built so that the rule's value alone decides the verdict:
the pair's two cases sit one on each side of it (the margins are written in the test's name), so a
constant moved in either direction by a meaningful amount, or a branch removed, turns one of them
red. divergence.py's INDEPENDENT, DECAY, ORIGIN_MIN and RISE are pinned in test_rules.py; here:
decisions.TIE_K, routing.UNCLASSIFIED_MAX, K on decision rows with a control, the ranking of
independent culprits and ``_born``'s ``not row.clear_flips``, judge.K_ROW, MIN_ROW_VALUES, SCALE_STEPS and LOOSE,
reach.SPREAD and MIXING, floor.ROUNDING_K and coverage.FAULT_ROWS.
"""
import numpy as np
import pytest
import torch

from inkling_probe.compare import compare

from dumps import write

T, W = 8, 16  # token rows, row width of the value keys


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _unit_rows(n=T, w=W, seed=0):
    """``[n, w]`` rows of norm 1: a row's error e_i (over an average row's norm) is its own relative error."""
    x = _rand(n, w, seed=seed).double()
    return (x / x.norm(dim=1, keepdim=True)).float()


def _off(x, rows, rel, seed=7):
    """``x`` with each of ``rows`` moved by ``rel`` of its norm, in a random direction (no relation)."""
    x = x.clone().double()
    for i, t in enumerate(rows):
        d = _rand(x.shape[1], seed=seed + i).double()
        x[t] += rel * x[t].norm() * d / d.norm()
    return x.float()


def _noisy(x, rel, seed):
    """``x`` with relative gaussian noise of rms ``rel`` (tensor-wide rel_rms ~ rel, no relation)."""
    d = _rand(*x.shape, seed=seed).double()
    return (x.double() + rel * x.double().norm() * d / d.norm()).float()


def _decision(layer, scores=True, **meta):
    key = f"layers.{layer}.mlp.topk_idx"
    kw = {"kind": "decision", **meta}
    if scores:
        kw["scores"] = f"layers.{layer}.mlp.router_logits"
    return key, kw


def _router(n=T, e=6, seed=3):
    """Router logits whose top 2 are well apart from the 3rd on every token, and the top-2 ids."""
    lg = _rand(n, e, seed=seed)
    lg[:, 0], lg[:, 1], lg[:, 2] = 3.0, 2.0, 1.0  # every token: experts 0 and 1, expert 2 a clear 3rd
    return lg, torch.topk(lg, 2, dim=-1).indices


def _clear_flip(ids, tokens):
    """Those tokens routed to expert 2 instead of expert 1 with their scores unchanged: a clear flip."""
    bad = ids.clone()
    for t in tokens:
        bad[t] = torch.tensor([0, 2])
    return bad


def _near_ties(lg, tokens, gap=2e-6):
    """Reference and candidate logits where ``tokens`` have experts 1 and 2 ``gap`` apart, the
    candidate's moved over (towards expert 2): benign near-tie flips; and both sides' top-2 ids."""
    ref, cand = lg.clone(), lg.clone()
    for t in tokens:
        ref[t, 2] = ref[t, 1] - gap
        cand[t, 2] = cand[t, 1] + gap
    return ref, cand, torch.topk(ref, 2, dim=-1).indices, torch.topk(cand, 2, dim=-1).indices


def _routed(lg, ids, experts, layer=1):
    key, kw = _decision(layer)
    return [(f"layers.{layer}.mlp.router_logits", lg), (key, ids, kw), (f"layers.{layer}.mlp.experts", experts)]


# --- decisions.TIE_K = 1.5: a near-tie when the reference's gap is within 1.5x the scores' move ----------
@pytest.mark.parametrize("gap_over_move, near_tie", [(1.25, True), (1.75, False)])
def test_tie_k_a_selection_flip_is_a_near_tie_up_to_one_and_a_half_moves(tmp_path, gap_over_move, near_tie):
    """Token 3 takes expert 2 over expert 1 (reference gap 0.02) while its recorded scores moved
    towards expert 2 by ``0.02 / gap_over_move`` in all (a choice made on scores a little off the
    recorded ones: a kernel's own rounding). With ``selection=True`` the gap is held to TIE_K x
    that move: 1.25 moves is a near-tie (measured, not blamed), 1.75 is a clear flip (the culprit)."""
    lg, ids = _router()
    gap, t = 0.02, 3
    lg[t, 2] = lg[t, 1] - gap
    m = gap / gap_over_move / 2  # each score's move
    cand = lg.clone()
    cand[t, 1] -= m
    cand[t, 2] += m  # moved towards expert 2, still below expert 1 (the choice was made elsewhere)
    cand_ids = _clear_flip(ids, [t])
    key, kw = _decision(1, selection=True)
    ref = write(tmp_path / "r", [[("layers.1.mlp.router_logits", lg), (key, ids, kw)]])
    cnd = write(tmp_path / "c", [[("layers.1.mlp.router_logits", cand), (key, cand_ids, kw)]])
    rep = compare(ref, cnd, threshold=0.01, explain=False)
    row = rep.row(key)
    assert not rep.row("layers.1.mlp.router_logits").diverged  # the scores' move is within allowance
    if near_tie:
        assert "1 near-tie" in row.note and not row.diverged and not rep.diverged
    else:
        assert "1 clear-margin" in row.note and row.clear_flips == 1
        assert [(c.key, c.born) for c in rep.culprits] == [(key, "clean_inputs")]


# --- routing.UNCLASSIFIED_MAX = 0.25: without router scores, up to a quarter of the tokens may change ----
@pytest.mark.parametrize("changed, diverged", [(2, False), (3, True)])
def test_unclassified_max_a_quarter_of_the_tokens_may_change_without_scores(tmp_path, changed, diverged):
    """No router scores recorded: a changed token cannot be classed; 2 of 10 (0.2) pass, 3 of 10
    (0.3) diverge."""
    n = 10
    _, ids = _router(n)
    key, kw = _decision(1, scores=False)
    x = _unit_rows(n)
    ref = write(tmp_path / "r", [[("layers.0.out", x), (key, ids, kw)]])
    cnd = write(tmp_path / "c", [[("layers.0.out", x), (key, _clear_flip(ids, range(changed)), kw)]])
    rep = compare(ref, cnd, explain=False)
    row = rep.row(key)
    assert f"{changed} unclassified" in row.note
    assert row.diverged is diverged and rep.diverged is diverged


# --- K on decision rows with a control: a candidate may change K = 2 x the control's fraction -----------
@pytest.mark.parametrize("flips, diverged", [(3, False), (5, True)])
def test_decision_k_with_a_control_allows_twice_the_controls_changed_fraction(tmp_path, flips, diverged):
    """The control changes 2 of 16 tokens against their scores (0.125); the candidate 3 (1.5x the
    control: passes) or 5 (2.5x: diverges, and is the culprit)."""
    n = 16
    lg, ids = _router(n)
    key, kw = _decision(1)
    steps = lambda i: [[("layers.1.mlp.router_logits", lg), (key, i, kw)]]
    ref = write(tmp_path / "r", steps(ids))
    ctl = write(tmp_path / "k", steps(_clear_flip(ids, [1, 9])))
    cnd = write(tmp_path / "c", steps(_clear_flip(ids, range(2, 2 + flips))))
    rep = compare(ref, cnd, control=ctl, explain=False)
    row = rep.row(key)
    assert row.floor == 2 / 16 and row.error == flips / 16
    assert row.diverged is diverged and rep.diverged is diverged
    assert [c.key for c in rep.culprits] == (["layers.1.mlp.topk_idx"] if diverged else [])


# --- independent culprits are ranked by jump, after the clean-input births --------------------------------
def test_independent_culprits_are_ranked_by_jump_not_by_execution_order(tmp_path):
    """A clean birth at layer 1, then two independent errors on top of it: layer 2's jump ~15, layer
    3's ~80. The ranking is the clean birth, then layer 3 (the larger jump), then layer 2."""
    xs = [_rand(64, W, seed=i) for i in range(3)]
    keys = ["layers.1.mlp.out", "layers.2.mlp.out", "layers.3.mlp.out"]
    cand = [_noisy(xs[0], 1e-4, 11), _noisy(xs[1], 2e-3, 12), _noisy(xs[2], 0.2, 13)]
    rep = compare(write(tmp_path / "r", [list(zip(keys, xs))]), write(tmp_path / "c", [list(zip(keys, cand))]),
                  explain=False)
    born = {r.key: (r.born, r.jump) for r in rep.rows}
    assert born[keys[0]][0] == "clean_inputs" and born[keys[1]][0] == born[keys[2]][0] == "independent"
    assert born[keys[2]][1] > born[keys[1]][1] > 8
    assert [c.key for c in rep.culprits] == [keys[0], keys[2], keys[1]]
    assert rep.first_divergence.key == keys[0]


# --- _born: a decision diverged by earlier steps' flips alone is not born again ---------------------------
def test_a_decision_diverged_by_an_earlier_steps_flip_alone_is_not_a_second_culprit(tmp_path):
    """A router dumped on its own (no layer in its keys: no cache feeders), run on two batches. Batch 0
    flips token 2 against its scores (the culprit); batch 1 changes nothing, yet the decision still
    reads diverged (its fraction counts over the steps so far) and its inputs are clean: without
    ``_born``'s ``not row.clear_flips`` it would be a second culprit for the same flip."""
    lg, ids = _router()
    x = _unit_rows()
    kw = {"kind": "decision", "scores": "moe.router_logits"}
    step = lambda i: [("moe.router_logits", lg), ("moe.topk_idx", i, kw), ("moe.out", x)]
    rep = compare(write(tmp_path / "r", [step(ids), step(ids)]),
                  write(tmp_path / "c", [step(_clear_flip(ids, [2])), step(ids)]), explain=False)
    s1 = rep.row("moe.topk_idx", step=1)
    assert s1.diverged and s1.clear_flips == 0 and s1.score_in < 0.5  # diverged on step 0's flip; clean inputs
    assert [(c.key, c.step) for c in rep.culprits] == [("moe.topk_idx", 0)]


# --- judge.K_ROW = 3: a token row diverges past 3x the key's allowance ------------------------------------
@pytest.mark.parametrize("times, diverged", [(2.4, False), (3.6, True)])
def test_k_row_one_row_diverges_past_three_allowances(tmp_path, times, diverged):
    """One token row of 64 off by ``times`` x the allowance (0.01, so the tensor's rel_rms stays
    under it): 2.4 passes, 3.6 diverges with that row named."""
    x = _unit_rows(64)
    ref = write(tmp_path / "r", [[("layers.0.mlp.out", x)]])
    cnd = write(tmp_path / "c", [[("layers.0.mlp.out", _off(x, [9], times * 0.01))]])
    rep = compare(ref, cnd, threshold=0.01, explain=False)
    row = rep.row("layers.0.mlp.out")
    assert row.error < row.threshold == 0.01  # the tensor alone is within allowance
    assert row.diverged is diverged and row.bad_rows == ([9] if diverged else [])


@pytest.mark.parametrize("times, diverged", [(2.6, False), (3.4, True)])
def test_k_row_a_key_of_one_token_row_is_judged_as_that_row(tmp_path, times, diverged):
    """A decode step's key holds one token row: its error against the control's on that row is a
    row's, not a tensor's (a single bf16 row's error varies 3x over decode steps), so it diverges
    past K_ROW (3) x the control's error, not K (2) x: 2.6x passes, 3.4x diverges."""
    x = _unit_rows(1, 64)
    ref = write(tmp_path / "r", [[("layers.0.mlp.out", x)]])
    ctl = write(tmp_path / "t", [[("layers.0.mlp.out", _off(x, [0], 0.01, seed=3))]])
    cnd = write(tmp_path / "c", [[("layers.0.mlp.out", _off(x, [0], times * 0.01))]])
    row = compare(ref, cnd, control=ctl, explain=False).row("layers.0.mlp.out")
    assert row.floor == pytest.approx(0.01, rel=1e-3) and row.diverged is diverged


# --- judge.SCALE_STEPS = 1: a key scaled along its own values past one epsilon (and K x the control's) --
@pytest.mark.parametrize("factor, diverged", [(1.005, False), (1.02, True)])
def test_scale_steps_a_scaled_key_diverges_under_a_noisy_control(tmp_path, factor, diverged):
    """bf16 values, both sides 3% noise (the control's error 0.03 allows 0.06), the candidate also
    x``factor``: x1.02 is within the error allowance (0.036) but 2.6 bf16 epsilons along the values:
    diverged, named as scaled; x1.005 (0.64 epsilons) passes."""
    x = _rand(64, 64, seed=1)
    noisy = lambda seed: x + 0.03 * x.norm(dim=1, keepdim=True) / 8 * _rand(64, 64, seed=seed)
    ref = write(tmp_path / "r", [[("layers.0.mlp.out", x.bfloat16())]])
    ctl = write(tmp_path / "t", [[("layers.0.mlp.out", noisy(5).bfloat16())]])
    cnd = write(tmp_path / "c", [[("layers.0.mlp.out", (noisy(6) * factor).bfloat16())]])
    row = compare(ref, cnd, control=ctl, explain=False).row("layers.0.mlp.out")
    assert row.error < 2 * row.floor  # the error's size alone is within allowance
    assert row.diverged is diverged and ("scaled x" in row.note) is diverged


# --- judge.MIN_ROW_VALUES = 16: rows narrower than 16 values are not judged alone -------------------------
@pytest.mark.parametrize("width, diverged", [(12, False), (20, True)])
def test_min_row_values_rows_of_fewer_than_sixteen_values_are_judged_with_the_tensor(tmp_path, width, diverged):
    """One row of 64 off by 5x the allowance (the tensor within it): found on a row of 20 values,
    judged with the tensor only on a row of 12 (top-k weights, gammas: too few values to judge a row)."""
    x = _unit_rows(64, width)
    ref = write(tmp_path / "r", [[("layers.0.mlp.out", x)]])
    cnd = write(tmp_path / "c", [[("layers.0.mlp.out", _off(x, [9], 0.05))]])
    rep = compare(ref, cnd, threshold=0.01, explain=False)
    row = rep.row("layers.0.mlp.out")
    assert row.error < 0.01 and row.diverged is diverged


# --- after a flip: the reach (reach.SPREAD, reach.MIXING) and how loosely it judges (judge.LOOSE) ---------
FLIP, CARRIED = 3, 0.5  # the flipped token; its own error at the expert sum (set aside there, measured)


def _after_flip(tmp_path, keys, n=T, threshold=0.01):
    """A near-tie flip of token 3 in layer 1 (its expert sum off by 0.5, set aside there), then the
    ``keys`` of layer 2: ``{key: (rows, rel)}``, those rows off by ``rel`` (every row with 1e-3 of
    noise, so each key is measured, not exact). What the flip reaches at attention is SPREAD x 0.5."""
    lg, _ = _router(n)
    rl, cl, ri, ci = _near_ties(lg, [FLIP])
    ex = _unit_rows(n, seed=1)
    ys = {key: _unit_rows(n, seed=2 + i) for i, key in enumerate(keys)}
    ref = write(tmp_path / "r", [_routed(rl, ri, ex) + list(ys.items())])
    cand = [(key, _off(_noisy(ys[key], 1e-3, 5 + i), *keys[key])) for i, key in enumerate(keys)]
    cnd = write(tmp_path / "c", [_routed(cl, ci, _off(ex, [FLIP], CARRIED)) + cand])
    rep = compare(ref, cnd, threshold=threshold, explain=False)
    assert "1 near-tie" in rep.row("layers.1.mlp.topk_idx").note
    assert rep.row("layers.1.mlp.experts").not_judged == {"set aside": 1}
    return rep


@pytest.mark.parametrize("times, diverged", [(1.7, False), (2.3, True)])
def test_spread_a_mixing_row_may_carry_twice_the_flipped_rows_error(tmp_path, times, diverged):
    """Attention after the flip may carry SPREAD (2) x the flipped row's error into a later row:
    1.7x passes, 2.3x diverges, that row named, its own culprit (the flip carried less). 1024 rows:
    the tensor's share of the flip (spread over them) stays far under one row's."""
    rep = _after_flip(tmp_path, {"layers.2.attn.out": ([FLIP + 1], times * CARRIED)}, n=1024)
    row = rep.row("layers.2.attn.out")
    assert row.error < row.threshold  # the tensor is within its allowance: the row decides
    assert row.diverged is diverged and rep.diverged is diverged
    assert row.bad_rows == ([FLIP + 1] if diverged else [])
    assert [c.key for c in rep.culprits] == (["layers.2.attn.out"] if diverged else [])
    assert row.reach == pytest.approx(2 * CARRIED, rel=1e-6)


@pytest.mark.parametrize("key, mixing", [("layers.2.attn.out", True), ("layers.2.attn_sconv", True),
                                         ("layers.2.mlp.out", False), ("layers.2.resid", False)])
def test_mixing_keys_named_like_attention_or_conv_get_the_mixing_bound(tmp_path, key, mixing):
    """Row 4 off by 1.5x the flipped row's error: a key that mixes token rows (named like attention
    or a conv) may carry it from row 3; a row-wise key (MLP, residual) carries only what row 4 itself
    carried in (nothing here), and diverges."""
    rep = _after_flip(tmp_path, {key: ([FLIP + 1], 1.5 * CARRIED)})
    row = rep.row(key)
    assert row.diverged is not mixing
    assert row.reach == (pytest.approx(2 * CARRIED, rel=1e-6) if mixing else 0.0)


@pytest.mark.parametrize("reach_over_allowance, loose", [(2.4, False), (3.6, True)])
def test_loose_a_row_allowed_over_three_times_its_own_allowance_is_judged_loosely(
        tmp_path, reach_over_allowance, loose):
    """Attention carries the flip on to row 4 (0.5, within its reach); the MLP after it is row-wise,
    so only its row 4 is allowed for the flip: SPREAD x 0.5 = 1.0 on top of its own allowance (3 x the
    key's). The key's allowance is set so that row's total is ``reach_over_allowance`` x its own:
    past LOOSE (3) it is counted as judged loosely (coverage, and a note naming the command that
    judges it tightly); under it, not. 256 rows: the tensor's share of the flip stays small."""
    threshold = 2 * CARRIED / np.sqrt(reach_over_allowance ** 2 - 1) / 3
    rep = _after_flip(tmp_path, {"layers.2.attn.out": ([FLIP + 1], CARRIED), "layers.2.mlp.out": ([], 0.0)},
                      n=256, threshold=threshold)
    row = rep.row("layers.2.mlp.out")
    assert not rep.diverged
    assert row.rows_loose == int(loose)
    assert rep.coverage()["rows_loose"] == rep.row("layers.2.attn.out").rows_loose + int(loose)
    assert any("judged loosely" in n and "layers.2.mlp.out" in n for n in rep.notes) is loose
    assert row.reach == pytest.approx(2 * CARRIED, rel=1e-2)


def test_a_row_before_the_flipped_token_is_judged_at_its_own_allowance(tmp_path):
    """Row 1 of attention, before the flipped token 3, off by 0.5 = 50x its allowance (0.01): the
    flip cannot reach it (causal), so it must diverge, row 1 named."""
    rep = _after_flip(tmp_path, {"layers.2.attn.out": ([1], 0.5)})
    row = rep.row("layers.2.attn.out")
    assert row.diverged and row.bad_rows == [1]


# --- floor.ROUNDING_K = 2: under a control, at least 2x the rounding rms of the inputs' precision ---------
@pytest.mark.parametrize("times, diverged", [(0.7, False), (1.35, True)])
def test_rounding_k_the_minimum_allowance_is_twice_the_rounding_of_the_inputs_precision(tmp_path, times, diverged):
    """An fp32 key computed after bf16 ones, whose control is almost exact (floor 1e-4): its allowance
    is the minimum, 2 x bf16's rounding rms (0.0045), not 2 x the floor. A candidate off by 0.7 of it
    passes, by 1.35 of it diverges."""
    minimum = 2 * 2.0 ** -7 / 2 / np.sqrt(3)
    x, h = _rand(64, W, seed=4), _rand(64, W, seed=5).bfloat16()
    step = lambda y: [[("layers.0.attn_norm", h), ("layers.0.mlp.out", y)]]
    ref = write(tmp_path / "r", step(x))
    ctl = write(tmp_path / "k", step(_noisy(x, 1e-4, 21)))
    cnd = write(tmp_path / "c", step(_noisy(x, times * minimum, 22)))
    rep = compare(ref, cnd, control=ctl, explain=False)
    row = rep.row("layers.0.mlp.out")
    assert row.floor == pytest.approx(1e-4, rel=0.01)  # 2 x the floor is far under the minimum
    assert row.diverged is diverged and rep.diverged is diverged
    assert row.threshold == pytest.approx(minimum)


# --- coverage.FAULT_ROWS = 0.25: a key with a quarter of its rows set aside is unchecked ------------------
@pytest.mark.parametrize("flipped, unchecked", [(2, False), (3, True)])
def test_fault_rows_a_key_with_a_quarter_of_its_rows_set_aside_is_unchecked(tmp_path, flipped, unchecked):
    """Near-tie flips on 2 of 10 tokens (0.2 set aside after them) leave the expert sum judged; on 3
    of 10 (0.3) it is unchecked, and compare says it could not check it."""
    n = 10
    lg, _ = _router(n)
    rl, cl, ri, ci = _near_ties(lg, range(1, 1 + flipped))
    ex = _unit_rows(n, seed=1)
    ref = write(tmp_path / "r", [_routed(rl, ri, ex)])
    cnd = write(tmp_path / "c", [_routed(cl, ci, _off(ex, range(1, 1 + flipped), 0.5))])
    rep = compare(ref, cnd, explain=False)
    row = rep.row("layers.1.mlp.experts")
    assert f"{flipped} near-tie" in rep.row("layers.1.mlp.topk_idx").note and not rep.diverged
    assert row.not_judged == {"set aside": flipped}
    assert (row.status == "unchecked") is unchecked and bool(rep.unchecked) is unchecked


def test_a_candidate_that_changes_what_the_control_changes_passes_at_every_step(tmp_path):
    """The control and the candidate each change 1 of 8 unscored decisions at step 0, none at step 1:
    the candidate behaves like the control at every step, so nothing diverges."""
    _, ids = _router()
    x = _unit_rows()
    key, kw = _decision(1, scores=False)
    step = lambda i: [("layers.0.out", x), (key, i, kw)]
    ref = write(tmp_path / "r", [step(ids), step(ids)])
    ctl = write(tmp_path / "k", [step(_clear_flip(ids, [2])), step(ids)])
    cnd = write(tmp_path / "c", [step(_clear_flip(ids, [5])), step(ids)])
    rep = compare(ref, cnd, control=ctl, explain=False)
    assert not rep.row(key, step=0).diverged
    assert not rep.row(key, step=1).diverged and not rep.diverged

"""After a changed decision every other row stays judged; coverage is part of the verdict; decode
steps read the cache and a different decoded token is a decision (issue 21 items 1-3)."""
import numpy as np
import pytest

from inkling_probe.compare import compare
from inkling_probe.compare import reach as reach_mod

from dumps import write

from .flow_toy import run

TOKENS = [(7 * i + 3) % 40 for i in range(32)]
NOISE = 2e-7  # fp32-like noise: the dtype defaults judge


def _pair(tmp_path, cand_kw, tokens=TOKENS):
    tie = {k: cand_kw[k] for k in ("tie", "tie_step") if k in cand_kw}
    a = write(tmp_path / "ref", run(tokens, **tie))
    b = write(tmp_path / "cand", run(tokens, noise=NOISE, flip=True, **cand_kw))
    return a, b


def test_a_benign_near_tie_flip_sets_aside_only_its_own_rows_and_passes(tmp_path):
    a, b = _pair(tmp_path, {"tie": (1, 5)})
    rep = compare(a, b, explain=False)
    d = rep.row("layers.1.mlp.topk_idx")
    assert d.decision and "1 near-tie" in d.note and not d.diverged
    assert not rep.diverged and not rep.unchecked, [(r.key, r.status, r.score) for r in rep.rows if r.diverged]
    ex = rep.row("layers.1.mlp.experts")
    assert ex.rows_judged == 31 and ex.not_judged == {"set aside": 1}  # the flipped token only
    later = rep.row("layers.3.attn.out")  # the flipped row aside; the rows after it judged, with an allowance
    assert later.not_judged.get("set aside", 0) < 4 and later.reach > 0 and later.rows_judged >= 28
    assert rep.to_dict()["rows"][0]["coverage"] == {"rows_recorded": 32, "rows_judged": 32, "rows_loose": 0,
                                                      "not_judged": {}}
    cov = rep.to_dict()["coverage"]  # the flipped token after its decision (and any flip it caused downstream)
    assert set(cov["not_judged"]) == {"set aside"} and cov["rows_judged"] >= 0.9 * cov["rows_recorded"]


def test_a_late_fault_after_a_near_tie_flip_is_found(tmp_path):
    """The issue's 80-token case in small: a flip at token 5, then x1.5 on rows >= 16 of a later
    layer's attn_norm. Before: rows >= 5 were set aside from layer 1 on, and it passed."""
    a, b = _pair(tmp_path, {"tie": (1, 5), "fault": ("layers.3.attn_norm", 0, range(16, 32), lambda t: 1.5 * t)})
    rep = compare(a, b, explain=False)
    assert rep.diverged and rep.culprit.key == "layers.3.attn_norm"
    assert [c.key for c in rep.culprits] == ["layers.3.attn_norm"]


def test_a_token_0_flip_then_a_100x_error_on_every_row_diverges(tmp_path):
    a, b = _pair(tmp_path, {"tie": (0, 0), "fault": ("layers.2.attn.out", 0, range(32), lambda t: 100 * t)})
    rep = compare(a, b, explain=False)
    assert rep.diverged and rep.culprit.key == "layers.2.attn.out"
    assert rep.row("layers.2.attn.out").score > 10


def test_reach_bound_is_needed_and_sufficient(tmp_path, monkeypatch):
    """Without the reach allowance the benign flip's consequences would be flagged: the allowance
    is what keeps the benign pair clean, not a blanket set-aside."""
    a, b = _pair(tmp_path, {"tie": (1, 5)})
    monkeypatch.setattr(reach_mod, "SPREAD", 0.0)
    assert compare(a, b, explain=False).diverged


def test_a_key_mostly_set_aside_is_unchecked_and_fails_with_a_reason(tmp_path):
    """A decode step whose one token flipped: its routed keys judge 0 of 1 rows."""
    ref = run(TOKENS[:8], decode=1, tie=(2, 0), tie_step=1)
    cand = run(TOKENS[:8], decode=1, tie=(2, 0), tie_step=1, flip=True, noise=NOISE)
    rep = compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand), explain=False)
    ex = rep.row("layers.2.mlp.experts", step=1)
    assert ex.status == "unchecked" and ex.rows_judged == 0 and ex.not_judged == {"set aside": 1}
    assert not rep.diverged and rep.unchecked and "layers.2.mlp.experts@1" in rep.unchecked_reason
    assert rep.to_dict()["unchecked_reason"]


def test_a_prefill_fault_carried_by_the_cache_is_one_culprit(tmp_path):
    """Rows 2 and 5 wrong in layer 1's attn_norm at the prefill: the decode steps read them from
    the cache; they inherit the error, they are not new culprits."""
    fault = ("layers.1.attn_norm", 0, [2, 5], lambda t: 1.8 * t)
    ref = run(TOKENS[:12], decode=2)
    cand = run(TOKENS[:12], decode=2, fault=fault, noise=NOISE)
    rep = compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand), explain=False)
    assert rep.diverged and [(c.key, c.step) for c in rep.culprits] == [("layers.1.attn_norm", 0)]
    assert any(r.diverged for r in rep.rows if r.step > 0)  # the decode steps do carry it


def test_a_decode_only_fault_is_born_at_its_step(tmp_path):
    fault = ("layers.3.attn.out", 1, [0], lambda t: 1.5 * t)
    rep = compare(write(tmp_path / "r", run(TOKENS[:12], decode=2)),
                  write(tmp_path / "c", run(TOKENS[:12], decode=2, fault=fault, noise=NOISE)), explain=False)
    assert [(c.key, c.step) for c in rep.culprits] == [("layers.3.attn.out", 1)]


def test_a_different_decoded_token_is_a_decision_not_a_culprit(tmp_path):
    """The candidate decodes another token at step 0 (its last logits row moved towards it): the
    embedding of step 1 is another token's, set aside; no 'embed step 1' culprit."""
    ref = run(TOKENS[:12], decode=1)
    tok = int(np.argsort(ref[0][-1][1][-1].numpy())[-2])  # the reference's second choice

    def nudge(t):
        t = t.clone()
        t[:, tok] = t.max() + 1e-4
        return t
    cand = run(TOKENS[:12], decode=1, fault=("logits", 0, [11], nudge))
    rep = compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand), explain=False)
    assert "decoded token differs" in rep.row("logits").note
    emb = rep.row("embed", step=1)
    assert emb.not_judged == {"set aside": 1} and not emb.diverged
    assert all(c.step == 0 for c in rep.culprits)


def test_ids_are_compared_as_sets_after_the_reach_change(tmp_path):
    """Same experts in another order: no flip, nothing set aside."""
    ref = run(TOKENS)
    cand = [[(k, t.flip(-1), kw) if k.endswith("topk_idx") else item for item in s
             for k, t, kw in [(*item, {}) if len(item) == 2 else item]] for s in ref]
    rep = compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand), explain=False)
    assert not rep.diverged and rep.coverage()["not_judged"] == {}


@pytest.mark.parametrize("spread", [reach_mod.SPREAD])
def test_reach_is_zero_before_the_flipped_token(spread):
    r = reach_mod.Reach()
    r.add(0, 1, 8, [5])
    r.observe("layers.1.mlp.experts", 0, 0, 8, 4, np.full(8, 0.01), [5], np.array([0.3]))
    allow = r.allowance("layers.2.attn.out", 0, 0, 2, 8, 4)
    assert np.all(allow[:6] == 0) and np.allclose(allow[6:], spread * 0.3)  # row 5 itself is set aside
    assert r.aside(0, 1, 8) == [5] and r.aside(0, 2, 8) == [5] and r.aside(1, 2, 8) == []  # every key after it, its step only


def test_a_teacher_forced_step_is_not_a_decoded_token_decision(tmp_path):
    """The logits' argmax differs but both sides are fed the same next token: nothing set aside."""
    ref = run(TOKENS[:12], decode=1, forced=[3])
    tok = int(np.argsort(ref[0][-1][1][-1].numpy())[-2])

    def nudge(t):
        t = t.clone()
        t[:, tok] = t.max() + 1e-4
        return t
    cand = run(TOKENS[:12], decode=1, forced=[3], fault=("logits", 0, [11], nudge))
    rep = compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand), explain=False)
    assert "decoded token differs" not in rep.row("logits").note
    assert rep.row("embed", step=1).not_judged == {}

"""Decoded tokens that part for several steps (compare/decoded.py, divergence.py): one fault, one
culprit, however many steps its tokens part (issue 41 item 6A); a second fault after they meet again
is its own culprit; teacher-forced steps stay judged."""
import numpy as np

from inkling_probe.compare import compare
from inkling_probe.compare.divergence import attribute, culprits
from inkling_probe.compare.report import Row

from dumps import write

from . import decode_toy as dt

NOISE = 2e-7
REF = dt.run()


def _nudge(step):
    """The step's last logits row decodes the reference's second choice (a clear margin)."""
    second = int(np.argsort(dict(REF[step])["logits"][-1].numpy())[-2])

    def f(t):
        t = t.clone()
        t[-1, second] = t[-1].max() + 1e-3
        return t
    return f


def _compare(tmp_path, faults, forced=None, ref_forced=None):
    ref = dt.run(forced=ref_forced) if ref_forced else REF
    cand = dt.run(faults=faults, forced=forced, noise=NOISE)
    parted = [s for s, (a, b) in enumerate(zip(dt.fed(ref), dt.fed(cand))) if a != b]
    return compare(write(tmp_path / "r", ref), write(tmp_path / "c", cand), explain=False), parted


def test_tokens_parting_for_every_later_step_is_one_culprit(tmp_path):
    """The fed ids are recorded first (as transformers' in.input_ids): ids 56 and 28 are under a whole
    row apart (relative), so the step was taken as teacher-forced, not set aside, and its ids and embed
    were born there: 9 culprits for one fault before."""
    rep, parted = _compare(tmp_path, [("logits", 1, _nudge(1))])
    assert parted == list(range(2, 9))
    assert [(c.key, c.step) for c in rep.culprits] == [("logits", 1)]
    assert all(rep.row(k, step=s).not_judged == {"set aside": 1} for s in parted for k in ("in.input_ids", "embed"))


def test_a_second_fault_after_the_tokens_meet_again_is_its_own_culprit(tmp_path):
    forced = [None] * 4 + dt.tokens(REF)[4:]  # steps 2-4 fed other tokens, the same ones from step 5
    rep, parted = _compare(tmp_path, [("logits", 1, _nudge(1)), ("layers.2.mlp.out", 7, lambda t: 1.5 * t)], forced)
    assert parted == [2, 3, 4]
    assert [(c.key, c.step) for c in rep.culprits] == [("logits", 1), ("layers.2.mlp.out", 7)]
    rep, _ = _compare(tmp_path / "alone", [("logits", 1, _nudge(1))], forced)
    assert [(c.key, c.step) for c in rep.culprits] == [("logits", 1)]


def test_teacher_forced_ids_keep_the_step_judged(tmp_path):
    """Both sides fed the same ids after a different argmax: nothing set aside, a fault there is found."""
    forced = dt.tokens(REF)
    rep, parted = _compare(tmp_path, [("logits", 1, _nudge(1)), ("layers.1.attn_norm", 2, lambda t: 1.5 * t)],
                           forced, ref_forced=forced)
    assert parted == [] and "decoded token differs" not in rep.row("logits", step=1).note
    assert [(c.key, c.step) for c in rep.culprits] == [("logits", 1), ("layers.1.attn_norm", 2)]


def _row(key, step, score, status=None, **kw):
    status = status or ("diverged" if score > 1 else "ok")
    return Row(key, step, score=score, status=status, layer=None, **kw)


def test_a_step_fed_another_token_is_never_born():
    """Should a step wholly fed another token still diverge (not set aside), its rows are the decision's
    consequence: the culprit is where the logits that decoded it went wrong, through every parted step."""
    rows = [_row("embed", 0, 0.1), _row("final", 0, 40.0), _row("logits", 0, 50.0, decodes=(1, 1, [0])),
            _row("embed", 1, 1e6), _row("logits", 1, 0.0, "unchecked", decodes=(2, 1, [0])),
            _row("embed", 2, 1e6), _row("logits", 2, 0.0, "unchecked")]
    attribute(rows)
    assert [(c.key, c.step) for c in culprits(rows)] == [("final", 0)]


def test_a_benign_decoded_change_taints_nothing():
    rows = [_row("embed", 0, 0.1), _row("logits", 0, 0.2, decodes=(1, 1, [0])), _row("embed", 1, 1e6)]
    attribute(rows)
    assert [(c.key, c.step) for c in culprits(rows)] == [("embed", 1)]

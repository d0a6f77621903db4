"""The late family's hand-instrumented cases (corpus/late_probe.py), compared directly (no transformers)."""

from inkling_corpus import late_probe
from inkling_probe.compare import compare

from dumps import write


def test_three_faults_written_through_probe_are_three_culprits(tmp_path):
    ref = write(tmp_path / "r", late_probe.run())
    cand = write(tmp_path / "c", late_probe.run(written=late_probe.FAULTS))
    rep = compare(ref, cand, explain=False)
    assert [c.key for c in rep.culprits] == list(late_probe.FAULTS)


def _decoded(tmp_path, fault):
    ref = write(tmp_path / "r", late_probe.run(decode=3, tie=True))
    computed = {("layers.1.mlp.out", 2): lambda t: t * 1.5} if fault else {}
    cand = write(tmp_path / "c", late_probe.run(decode=3, tie=True, flip=True, noise=2e-7, computed=computed))
    return compare(ref, cand, explain=False)


def test_a_different_decoded_token_is_a_decision_and_its_step_is_unchecked(tmp_path):
    rep = _decoded(tmp_path, False)
    assert "decoded token differs" in rep.row("logits").note
    assert not rep.diverged and rep.row("embed", step=1).not_judged == {"set aside": 1}
    assert rep.unchecked  # step 1's one row is the other token's: never 'within tolerance'


def test_a_fault_two_steps_after_a_different_decoded_token_is_found(tmp_path):
    """Row-wise keys after a different decoded token are allowed SPREAD x their own row's incoming
    error (compare/reach.py), not the other token's error at the key: a x1.5 fault two steps on is seen."""
    rep = _decoded(tmp_path, True)
    assert rep.culprit is not None and (rep.culprit.key, rep.culprit.step) == ("layers.1.mlp.out", 2)

"""A key holding its step's last token rows (lm_head under generate, ``[1, 1, H]``) is judged at
those tokens: a benign flip on the last prompt token sets its row aside there instead of reading as
a divergence of the whole key, and a fault on it after a flip elsewhere is still found."""
import torch

from inkling_probe.compare import compare
from inkling_probe.compare import tail_rows
from inkling_probe.hooks import _Capture

from dumps import write

from .flow_toy import run

TOKENS = [(7 * i + 3) % 40 for i in range(32)]  # 32 tokens, H = 32: the width equals the tokens
NOISE = 2e-7


def _pair(tmp_path, **cand_kw):
    tie = {"tie": cand_kw["tie"]}
    a = write(tmp_path / "ref", run(TOKENS, tail_head=True, **tie))
    b = write(tmp_path / "cand", run(TOKENS, noise=NOISE, flip=True, tail_head=True, **cand_kw))
    return a, b


def test_a_flip_on_the_last_token_sets_the_tail_row_aside(tmp_path):
    a, b = _pair(tmp_path, tie=(1, 31))
    rep = compare(a, b, explain=False)
    assert not rep.diverged, [(r.key, r.score) for r in rep.rows if r.diverged]
    for key in ("lm_head.in.0", "lm_head"):
        assert rep.row(key).not_judged == {"set aside": 1}, key


def test_without_the_tail_the_same_flip_reads_as_a_divergence(tmp_path, monkeypatch):
    """The rule is what keeps the benign pair from being flagged (mutation check)."""
    a, b = _pair(tmp_path, tie=(1, 31))
    monkeypatch.setattr(tail_rows.TailRows, "find", lambda self, *a, **k: None)
    rep = compare(a, b, explain=False)
    assert rep.diverged and rep.culprit.key in ("lm_head.in.0", "lm_head")


def test_a_fault_on_the_tail_after_an_earlier_flip_is_named(tmp_path):
    a, b = _pair(tmp_path, tie=(1, 20), fault=("lm_head", 0, [0], lambda t: 1.5 * t))
    rep = compare(a, b, explain=False)
    assert rep.diverged and rep.culprit.key == "lm_head"
    assert rep.row("lm_head.in.0").status == "ok"


def test_a_tail_is_only_a_slice_of_the_rows_before_it(tmp_path):
    """A [1, 1, H] key whose values are not the last row of the key before it stays whole."""
    steps = run(TOKENS, tie=(1, 31), tail_head=True)
    steps[0] = [(k, t * 1.01 if k == "lm_head.in.0" else t, *rest) for k, t, *rest in steps[0]]
    a = write(tmp_path / "ref", steps)
    b = write(tmp_path / "cand", run(TOKENS, noise=NOISE, flip=True, tail_head=True, tie=(1, 31)))
    rep = compare(a, b, explain=False)
    assert rep.row("lm_head.in.0").not_judged == {}


def test_the_recorder_reads_one_row_of_width_T_as_no_token_dim():
    """[B, 1, X] with X equal to the prompt's length is one row of width X, not [B, heads=1, T]."""
    cap = _Capture((), None, "auto")
    cap.batch_tokens = (1, 64)
    assert cap.layout(torch.zeros(1, 1, 64)) == (None, {})
    assert cap.layout(torch.zeros(1, 4, 64))[0] == 2  # [B, heads, T]
    assert cap.layout(torch.zeros(1, 1, 64, 64))[0] == 2  # [B, 1, T, T] (a mask)
    assert cap.layout(torch.zeros(1, 64, 32))[0] == 1

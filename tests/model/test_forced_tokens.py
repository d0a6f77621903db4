"""forced_tokens: the reference's tokens read from a dump (argmax of logits, or the ids each forward was
fed), the checks that refuse what can't be forced, and the one generation loop taking them."""
import pytest
import torch

from dumps import write
from inkling_model.generate import Eos, generation_loop
from inkling_model.switches import forced_tokens
from inkling_model.switches.forced_tokens import ForcedTokens

V = 8


def _logits(*winners, rows=1):
    """One step's logits: ``rows`` rows, the last one's argmax at ``winners[0]`` (margin 1 over the rest)."""
    t = torch.zeros(rows, V)
    t[-1, winners[0]] = 1.0
    return t


def _embed(ids):
    return torch.eye(16)[torch.tensor(ids)] + 0.1  # a token's "embedding": its own row


def _ref(tmp_path, tokens=(3, 5, 1), prompt=(0, 1, 2, 4), name="ref", embed=True):
    steps, fed = [], [list(prompt)] + [[t] for t in tokens[:-1]]
    for ids, tok in zip(fed, tokens):
        items = [("embed", _embed(ids))] if embed else []
        steps.append(items + [("logits", _logits(tok, rows=len(ids)))])
    return write(tmp_path / name, steps)


def test_tokens_are_the_argmax_of_each_steps_last_logits_row(tmp_path):
    f = ForcedTokens(_ref(tmp_path))
    assert f.tokens == [3, 5, 1] and f.ref.prompt is None and "argmax" in f.ref.source
    f.check_prompt([0, 1, 2, 4])  # without ids: its length (the embed rows of step 0)
    with pytest.raises(ValueError, match="3 ids, the reference's 4"):
        f.check_prompt([0, 1, 2])
    f.check_embedding([0, 1, 2, 4], 3, lambda ids: _embed(ids).numpy())
    with pytest.raises(ValueError, match="prompt differs .* at token 2"):
        f.check_embedding([0, 1, 7, 4], 3, lambda ids: _embed(ids).numpy())


def test_a_sampled_reference_is_caught_by_its_embed_rows(tmp_path):
    steps = [[("embed", _embed([0, 1])), ("logits", _logits(3, rows=2))],
             [("embed", _embed([6])), ("logits", _logits(5))]]  # step 1 was fed 6, not the argmax 3
    f = ForcedTokens(write(tmp_path / "ref", steps))
    with pytest.raises(ValueError, match="step 1 was fed another token than 3"):
        f.check_embedding([0, 1], 2, lambda ids: _embed(ids).numpy())


def test_ids_win_over_logits_and_the_prompt_is_checked_exactly(tmp_path):
    steps = [[("in.input_ids", torch.tensor([[0, 1, 2]])), ("logits", _logits(3, rows=3))],
             [("in.input_ids", torch.tensor([[6]])), ("logits", _logits(4))]]  # sampled: fed 6, not 3
    f = ForcedTokens(write(tmp_path / "ref", steps))
    assert f.ref.prompt == [0, 1, 2] and f.tokens == [6]  # the last token: not known (not greedy)
    with pytest.raises(ValueError, match="at token 2"):
        f.check_prompt([0, 1, 5])
    with pytest.raises(ValueError, match="decoded 1 tokens"):
        f.check_length(2, eos_ids=[7])


def _filtered(path, logits, **settings):
    import inkling_probe

    with inkling_probe.recording(str(path), writer="inline", **settings):
        for t in logits:
            inkling_probe.step()
            inkling_probe.probe("logits", t)
    return str(path)


def test_bad_dumps_are_errors(tmp_path):
    with pytest.raises(ValueError, match="no tokens recorded"):
        ForcedTokens(write(tmp_path / "empty", [[("layers.0.attn_norm", torch.zeros(2, 4))]]))
    with pytest.raises(ValueError, match="step filter"):
        ForcedTokens(_filtered(tmp_path / "gap", [_logits(1)] * 3, steps="0,2"))
    with pytest.raises(ValueError, match="one sequence"):
        ForcedTokens(write(tmp_path / "batch", [[("logits", _logits(1, rows=3))], [("logits", _logits(2, rows=2))]]))


def test_the_generation_loop_feeds_them_and_notes_its_own_picks(tmp_path, monkeypatch):
    monkeypatch.setenv(forced_tokens.ENV, _ref(tmp_path, tokens=(3, 5, 1)))
    forced_tokens.reset()
    own = iter([_logits(3), _logits(2), _logits(1)])  # the candidate's own argmax: 3, then 2 (fed 5), then 1
    fed = []

    def decode(active, tokens):
        fed.append(tokens)
        return next(own)

    out = generation_loop(lambda: next(own), decode, 1, 3, Eos(None))
    assert out[0].tokens == [3, 5, 1] and fed == [[3], [5]]
    assert forced_tokens.active().decisions == [{"step": 1, "forced": 5, "own": 2, "margin": 1.0}]
    forced_tokens.reset()
    monkeypatch.delenv(forced_tokens.ENV)
    assert forced_tokens.active() is None

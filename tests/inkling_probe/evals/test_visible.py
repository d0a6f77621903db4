"""Visible content of Inkling chat output, batch and streaming: hand cases, and property tests that any
split into deltas (control tokens cut included) gives the whole text's answer."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkling_probe.evals.visible import CONTROL, VisibleStream, visible


@pytest.mark.parametrize("text,answer", [
    ("<|content_text|>Paris<|end_message|>", "Paris"),
    ("<|content_thinking|>the capital...<|content_text|>Paris<|content_model_end_sampling|>ignored", "Paris"),
    ("<|content_text|>A<|content_invoke_tool_json|>{}<|content_text|>B<|end_message|>", "AB"),
    ("<|content_text|><|end_message|>", ""),  # an empty visible block: an empty answer, not None
    ("<|content_text|>x <|foo|> y", "x <|foo|> y"),  # not a control token: text
    ("<|content_text|>Hi<|end_message|><|message_user|><|content_text|>more?<|end_message|>", "Hi"),
    ("<|content_text|>Hi<|end_message|><|message_model|><|content_text|> again", "Hi again"),
    ("<<|content_text|>a<|content_te", "a<|content_te"),  # an unfinished token at the end is text
    ("<|content_text|><", "<"),
])
def test_hand_cases(text, answer):
    assert visible(text) == answer


@pytest.mark.parametrize("text", [
    "Paris", "", "<|content_thinking|>let me think<|end_message|>",
    "<|content_invoke_tool_json|>{\"q\": 1}<|content_model_end_sampling|>",
    "<|message_user|><|content_text|>not the model's<|end_message|>",
    "<|content_model_end_sampling|><|content_text|>after the end",
])
def test_no_visible_block_is_no_answer(text):
    assert visible(text) is None


def test_stream_returns_visible_deltas():
    s = VisibleStream()
    got = [s.feed(d) for d in ("<|content_thi", "nking|>hm<|con", "tent_text|>Pa", "ris<|end_mes", "sage|>x")]
    assert got == ["", "", "Pa", "ris", ""] and s.finish() == "" and s.answer == "Paris"
    assert [(b.role, b.kind, b.text) for b in s.blocks] == [
        ("model", "thinking", "hm"), ("model", "text", "Paris"), (None, None, "x")]


pieces = st.one_of(st.sampled_from(CONTROL), st.text(alphabet="ab<|>_ ", max_size=6),
                   st.sampled_from(["<|", "|>", "<|content_", "text|>", "<|end_"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(pieces, max_size=12), st.lists(st.integers(0, 200), max_size=8))
def test_any_split_equals_the_whole(parts, cuts):
    text = "".join(parts)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    s = VisibleStream()
    streamed = "".join(s.feed(text[a:b]) for a, b in zip(bounds, bounds[1:])) + s.finish()
    answer = s.answer
    assert answer == visible(text)
    assert streamed == (answer or "")  # every visible character is emitted once, in order, as it completes


@settings(max_examples=100, deadline=None)
@given(st.lists(pieces, max_size=10))
def test_one_character_at_a_time(parts):
    text = "".join(parts)
    s = VisibleStream()
    streamed = "".join(s.feed(ch) for ch in text) + s.finish()
    assert s.answer == visible(text) and streamed == (s.answer or "")

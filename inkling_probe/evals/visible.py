"""The visible content of Inkling chat output: the text blocks of the model's message, nothing else.

A response continues the model message its prompt opened (``<|message_model|>``). Control tokens
frame it: ``<|message_model|>``, ``<|message_user|>``, ``<|message_system|>``, ``<|message_tool|>``
open a message; ``<|end_message|>`` closes one; ``<|content_text|>``, ``<|content_thinking|>``,
``<|content_invoke_tool_json|>``, ``<|content_invoke_tool_text|>``, ``<|content_xml|>`` open a block
that runs to the next control token; ``<|content_model_end_sampling|>`` ends the output. The
visible answer is the text of ``<|content_text|>`` blocks in model messages, joined as they stand.
Output with no such block has no answer (None), never the raw text. Any other ``<|...|>`` is text.

Batch (:func:`visible`) and streaming (:class:`VisibleStream`) are one state machine: deltas split
anywhere, control tokens included, give the same answer as the whole text, and the visible deltas
(those :meth:`VisibleStream.feed` returns, then :meth:`VisibleStream.finish`) concatenate to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MESSAGES = {"<|message_model|>": "model", "<|message_user|>": "user", "<|message_system|>": "system",
            "<|message_tool|>": "tool"}
BLOCKS = {"<|content_text|>": "text", "<|content_thinking|>": "thinking",
          "<|content_invoke_tool_json|>": "tool_json", "<|content_invoke_tool_text|>": "tool_text",
          "<|content_xml|>": "xml"}
END_MESSAGE = "<|end_message|>"
END_SAMPLING = "<|content_model_end_sampling|>"
CONTROL = (*MESSAGES, *BLOCKS, END_MESSAGE, END_SAMPLING)
_PREFIXES = {t[:k] for t in CONTROL for k in range(1, len(t))}  # proper prefixes: held back at a delta's end
_LONGEST = max(map(len, CONTROL))


@dataclass
class Block:
    """One block of the output: the message role it is in, its kind, and its text."""

    role: str | None
    kind: str | None  # None: text outside any block (framing, not visible)
    text: str = ""


@dataclass
class VisibleStream:
    """Feed decoded deltas: :meth:`feed` returns the newly visible text, :meth:`finish` what was held
    back to the end; :attr:`answer` is the visible answer so far (None while no text block was seen)."""

    role: str | None = "model"
    kind: str | None = None
    ended: bool = False
    blocks: list[Block] = field(default_factory=list)
    _pending: str = ""
    _visible: list[str] = field(default_factory=list)
    _any_text_block: bool = False

    def feed(self, delta: str) -> str:
        """Consume ``delta``; the visible text it completes (a control token cut at its end waits)."""
        buf, out = self._pending + delta, []
        while buf and not self.ended:
            at, token = _next_control(buf)
            if token is None:
                keep = _held_back(buf)
                out.append(self._text(buf[: len(buf) - keep]))
                buf = buf[len(buf) - keep:]
                break
            out.append(self._text(buf[:at]))
            self._control(token)
            buf = buf[at + len(token):]
        self._pending = "" if self.ended else buf
        return "".join(out)

    def finish(self) -> str:
        """End of output: the held-back end is text after all; returns its visible part."""
        tail, self._pending = self._pending, ""
        return self._text(tail) if tail and not self.ended else ""

    @property
    def answer(self) -> str | None:
        """The visible answer (after :meth:`finish`, the whole one); None when no text block was seen."""
        return "".join(self._visible) if self._any_text_block else None

    def _text(self, s: str) -> str:
        if not s:
            return ""
        if not self.blocks or (self.blocks[-1].role, self.blocks[-1].kind) != (self.role, self.kind):
            self.blocks.append(Block(self.role, self.kind))
        self.blocks[-1].text += s
        if self.role == "model" and self.kind == "text":
            self._visible.append(s)
            return s
        return ""

    def _control(self, token: str) -> None:
        if token == END_SAMPLING:
            self.ended = True
        elif token == END_MESSAGE:
            self.role, self.kind = None, None
        elif token in MESSAGES:
            self.role, self.kind = MESSAGES[token], None
        else:
            self.kind = BLOCKS[token]
            if self.role == "model" and self.kind == "text":
                self._any_text_block = True
            self.blocks.append(Block(self.role, self.kind))


def _next_control(buf: str) -> tuple[int, str | None]:
    """The first control token in ``buf`` and where it starts."""
    at = buf.find("<|")
    while at >= 0:
        end = buf.find("|>", at + 2)
        if end < 0:
            break
        candidate = buf[at: end + 2]
        if candidate in CONTROL:
            return at, candidate
        at = buf.find("<|", at + 1)
    return -1, None


def _held_back(buf: str) -> int:
    """Length of the longest end of ``buf`` that may still become a control token."""
    for k in range(min(len(buf), _LONGEST - 1), 0, -1):
        if buf[-k:] in _PREFIXES:
            return k
    return 0


def visible(text: str) -> str | None:
    """The visible answer of a whole output (see the module docstring); None when there is none."""
    stream = VisibleStream()
    stream.feed(text)
    stream.finish()
    return stream.answer

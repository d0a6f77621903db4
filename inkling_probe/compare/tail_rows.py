"""Keys that hold the last ``k`` token rows of their step, found by value.

transformers' ``generate`` computes the logits of the last prompt row only (``logits_to_keep``), as
engines prune hidden states before the LM head: in the prefill step ``lm_head``'s input is
``[B, 1, H]`` while every other key holds ``[B, T, H]``. Judged as a whole tensor, that one row
gets no share of what a changed decision on the last token carries, and its own row is not set
aside when the flip is on it: a benign routing flip on the last prompt token then reads as a
divergence at ``lm_head``.

:class:`TailRows` recognises such a key without trusting its name or its recorded token dim (the
recorder cannot tell ``[B, 1, H]`` from ``[B, heads, T]`` when ``H`` equals ``T``): its reference
rows are exactly the last ``k`` rows of the last key of its width recorded before it in the step
(a slice), or it follows such a key with the same leading shape and is row-wise (``lm_head``'s
output after its input). Its ``k`` rows are then tokens ``T - k .. T - 1``: the walker sets aside,
reaches and observes them at those tokens (:mod:`.reach`). Only looked for in a step with a changed
decision (elsewhere a whole key is judged the same either way), so it costs one extra read of a
reference array per such key, none otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from inkling_probe.compare.align import Entry


@dataclass(frozen=True)
class Tail:
    """A key's rows as the last of its step's tokens."""

    offset: int  # the token of its first row (T - k)
    rows: int  # k
    token_dim: int  # the dim of the key's shape that holds the k rows


class TailRows:
    """Per compare: the last key of each width with the step's token rows, and the last tail."""

    def __init__(self) -> None:
        self.full: dict = {}  # (step, width) -> (reference Entry, token dim, token rows)
        self.previous: tuple | None = None  # (step, shape without its width, Tail | None) of the last value key

    def find(self, ref_dump, p, n_tokens, row_wise) -> Tail | None:
        """The tail of pair ``p``, or None; ``n_tokens()``: the token rows of its step's changed
        decisions (None: none), ``row_wise()``: whether its op is row-wise. Both are asked only of a
        key shaped like a tail, so every other key costs a look at its shape."""
        shape = tuple(p.ref.global_shape())
        if len(shape) < 2 or p.ref.first.get("shard") == "concat" and len(p.ref.rows) > 1:
            return None
        lead, k, width = shape[:-2], shape[-2], shape[-1]
        if any(d != 1 for d in lead):
            return None
        n_tokens = n_tokens()
        if n_tokens is None or not 1 <= k < n_tokens:
            return None
        prev = self.previous
        if prev is not None and prev[0] == p.step and prev[1] == shape[:-1] and prev[2] is not None and row_wise():
            return prev[2]  # a row-wise op on a tail (lm_head after its input)
        full = self.full.get((p.step, width))
        if full is None or full[2] != n_tokens:
            return None
        entry, dim, _ = full
        try:
            before = np.moveaxis(np.asarray(ref_dump.array(entry.key, step=entry.step, call=entry.call)), dim, 0)
            mine = np.asarray(ref_dump.array(p.ref.key, step=p.ref.step, call=p.ref.call)).reshape(k, width)
        except Exception:  # unreadable: the key stays whole (its own row says why)
            return None
        if before.size != n_tokens * width:
            return None
        if not np.array_equal(before.reshape(n_tokens, width)[n_tokens - k:], mine):
            return None
        return Tail(n_tokens - k, k, len(shape) - 2)

    def seen(self, p, tail: Tail | None, token_dim: int | None, token_rows: int | None) -> None:
        """Remember the pair just judged (its tail, or its full token rows by width)."""
        shape = tuple(p.ref.global_shape())
        self.previous = (p.step, shape[:-1], tail)
        if tail is None and token_dim is not None and token_rows and len(shape) >= 2:
            width = int(np.prod(shape)) // token_rows
            self.full[(p.step, width)] = (p.ref, token_dim, token_rows)


def as_rows(e: Entry, tail: Tail) -> Entry:
    """The entry with its tail rows' dim as its token dim (for measuring row by row)."""
    return replace(e, rows=[dict(r, token_dim=tail.token_dim) for r in e.rows])

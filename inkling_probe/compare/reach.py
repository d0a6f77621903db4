"""What a changed decision can reach, and so what every other row is allowed for it.

A changed decision (a routing flip, a different decoded token) changes its own token's rows in
every key after it in its step (they all consume it, directly or through the residual stream);
those rows are **set aside** there (the decision is judged once, at the decision; their own error
is still measured, as what the flip carries). Every other row stays judged. What the flipped token's new values can do to them is
bounded by where they can go and by how large they are:

- **where**: in the decision's step, only to rows at or after the flipped token (causal mixing:
  attention, short convs), and only in keys after the decision in execution order. Rows before the
  flipped token, and every key before the decision, get no allowance for it. In later (decode)
  steps every row is a later position, but it reads the flipped token only through what the cache
  holds of it: a key that was not after the decision in the flip's own step (attention of the
  flip's layer and of the layers before it) gets nothing.
- **how large**: a row mixed from others carries at most a convex share of their errors as they
  entered the key (attention weights sum to 1; a conv tap is a share). The bound for row ``t`` is
  ``SPREAD`` x the largest error, at the key's input, of the rows from the flipped token to ``t``
  (the mixing sources: the flipped row and the rows it already reached). The input is the last key
  of the same row width recorded in the step, and the last one of that width and the nearest row
  scale (the same stream: a residual add reads the residual written before; norm outputs follow
  norm outputs); else the last key of any width, outside the decision's own layer. Inside it, the
  first tensor of a width after the decision (an expert sum) is position-wise and gets nothing. ``SPREAD`` = 2: a mixed row can carry more than its sources in relative terms (a
  peaked attention head copies a larger row into a smaller one), measured up to 1.5x on inkling_model
  tiny bf16 vs fp32 (80 tokens, seed 3). A key's own values never widen its own allowance, and a
  key that diverged records nothing: its error is not the decision's, and its consequences stay
  judged. In later steps the bound is the flipped row's error at the same key in its own step.

Rows after a flip are judged against ``hypot(row allowance, reach)``: any one row may have taken
the whole share (a peaked head). The tensor is judged against ``hypot(tensor allowance, rms over
rows of SPREAD x max(the row's own carried error, the cummax / sqrt(rows since the flip)))``
(rel_rms^2 is the mean of the rows' e_i^2): the flipped row's error shared out over the rows after
it, as attention that is not peaked on it shares it (uniform attention gives row t a 1/(t - f + 1)
share, under the bound). A sink-like head that copies the flipped row into every later row
exceeds it: measured, not proven (docs/COMPARE.md, failure modes).
``carry_score`` (the score without the reach) keeps an upstream fault's taint alive through keys
whose widened allowance hides it (compare/divergence.py's DECAY test).

Failure modes (docs/COMPARE.md section 4): a fault on the rows after a flip no larger than twice
what the flip carried there is not seen there (it is seen where it grows, or with
``run --force-routing``); the keys of the flip's own layer after the expert sum (the layer's output,
its conv, its residual) allow the flipped row's whole routed difference to the rows after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SPREAD = 2.0  # a mixed row carries at most a convex share of the flipped row's error (module docstring)
# Keys whose op mixes token rows (attention, convolutions over tokens, recurrences), by name. Every
# other key is row-wise: row t's output is a function of row t's input only (norms, projections, MLPs,
# experts, routers, residual adds), so a flip elsewhere reaches it only through what row t already
# carries. A row-wise key named like a mixing one is only judged looser (never a false alarm); a mixing
# key named like neither must be declared (a name map's ``mixing`` globs).
MIXING = ("*.attn", "*.attn.*", "*self_attn*", "*cross_attn*", "*.attention", "*.attention.*", "*conv*",
          "*mixer*", "*ssm*", "*mamba*", "*rnn*", "*recurren*", "*lstm*", "*gru*", "*scan*", "*time_mix*",
          "*token_shift*", "*mha*", "*mqa*", "*gqa*", "*sdpa*", "*flash*", "*linear_attn*")


@dataclass
class Flip:
    """One changed decision: its token row, where it happened, the errors its row was measured at."""

    token: int
    step: int
    layer: int | None  # the decision's layer; None: the whole step (a different decoded token)
    n_rows: int
    kind: str = "routing"  # routing | token
    at_key: dict = field(default_factory=dict)  # (key, call) -> its error there (for later steps)

    def consumer(self, step: int, layer) -> bool:
        """A key of the decision's own step and layer (after it)."""
        return step == self.step and (self.layer is None or layer == self.layer)


class Reach:
    """The changed decisions of one compared side, in execution order; ``mixing``: key globs of ops
    that mix token rows besides :data:`MIXING`."""

    def __init__(self, mixing=()) -> None:
        self.mixing = tuple(MIXING) + tuple(mixing)
        self.flips: list[Flip] = []
        self.inputs: dict = {}  # (step, row width) -> [n] every row's error at the last key of that width
        self.last: dict = {}  # step -> [n] every row's error at the last key recorded (any width)
        self.own = np.zeros(0)  # [n] the last allowance's share spread over rows: the tensor's (docstring)

    def add(self, step: int, layer, n_rows: int, tokens, kind: str = "routing") -> None:
        known = {(f.step, f.token) for f in self.flips if f.layer == layer or f.kind == "token"}
        for t in tokens:
            if (step, int(t)) not in known:
                self.flips.append(Flip(int(t), step, layer, n_rows, kind))

    def aside(self, step: int, layer, n: int, offset: int = 0) -> list[int]:
        """Token rows set aside at a key of ``step``/``layer`` with ``n`` token rows (``offset``: the
        token of its first row, for a key holding the step's last rows: compare/tail_rows.py)."""
        full = n + offset
        return sorted({f.token - offset for f in self.flips
                       if f.step == step and f.n_rows == full and offset <= f.token < full})

    def allowance(self, key: str, call: int, step: int, layer, n: int, width: int,
                  scale: float = 0.0, offset: int = 0) -> np.ndarray | None:
        """``[n]`` the reach bound per token row (0 where no flip reaches), None when none does;
        ``scale``: the key's average row norm (the reference's rms x sqrt(width)); ``offset``: the
        token of the key's first row (a key holding the step's last rows)."""
        if offset:
            out = self.allowance(key, call, step, layer, n + offset, width, scale)
            self.own = self.own[offset:]
            return out[offset:] if out is not None and out[offset:].any() else None
        out, own = np.zeros(n), np.zeros(n)
        mixing = self.mixes(key)
        for f in self.flips:
            if f.step == step:
                if f.n_rows != n or f.token >= n:
                    continue
                if not mixing:  # row-wise: each row carries what its own input carried
                    seen = self._own_input(step, width, scale, n)
                    if seen is not None:
                        out[f.token:] = np.maximum(out[f.token:], SPREAD * seen[f.token:])
                        own[f.token:] = np.maximum(own[f.token:], SPREAD * seen[f.token:])
                    continue
                seen = self._input(step, width, scale, n, f.consumer(step, layer))
                if seen is None:
                    continue  # the first tensor of its width after the decision, in its layer: position-wise
                carried = np.maximum.accumulate(seen[f.token:])  # the mixing sources up to each row
                out[f.token:] = np.maximum(out[f.token:], SPREAD * carried)
                spread = carried / np.sqrt(np.arange(1, n - f.token + 1))  # the share spread over later rows
                own[f.token:] = np.maximum(own[f.token:], SPREAD * np.maximum(seen[f.token:], spread))
            elif f.step < step and not mixing:
                seen = self._own_input(step, width, scale, n)  # what the rows carry in from the cache
                if seen is not None:
                    out[:] = np.maximum(out, SPREAD * seen)
                    own[:] = np.maximum(own, SPREAD * seen)
            elif f.step < step and (key, call) in f.at_key:
                out[:] = np.maximum(out, SPREAD * f.at_key[(key, call)])
                own[:] = np.maximum(own, SPREAD * f.at_key[(key, call)])
        for t in self.aside(step, layer, n):
            out[t] = own[t] = 0.0
        self.own = own
        return out if out.any() else None

    def mixes(self, key: str) -> bool:
        """Whether the key's op mixes token rows (:data:`MIXING` and the declared globs)."""
        from inkling_probe.settings import matches_any

        return matches_any(key, list(self.mixing))

    def _input(self, step: int, width: int, scale: float, n: int, consumer: bool) -> np.ndarray | None:
        """``[n]`` the rows' error as they enter a key: :meth:`_carried`, else (outside the decision's
        own layer) the last key of any width; None when nothing of that step was observed."""
        seen = self._carried(step, width, scale, n)
        if seen is None and not consumer:
            seen = self.last.get(step)  # a new width in a later layer: carried from the last key
        return seen if seen is not None and len(seen) == n else None

    def _own_input(self, step: int, width: int, scale: float, n: int) -> np.ndarray | None:
        """``[n]`` what each row carries into a row-wise key: the larger of its error at the last key
        recorded (the op's input in a chain: ``down(act)``) and at the last of the same width and
        scale (a residual add reads the stream written before); None when nothing was observed."""
        got = [a for a in (self.last.get(step), self._carried(step, width, scale, n)) if a is not None and len(a) == n]
        return np.maximum.reduce(got) if got else None

    def _carried(self, step: int, width: int, scale: float, n: int) -> np.ndarray | None:
        """``[n]`` the rows' error on the last key of this width, and on the last one of this width
        and the nearest row scale (the same stream: a residual add reads the residual written before)."""
        seen = self.inputs.get((step, width))
        if not seen:
            return None
        last, by_scale = seen
        b = _bucket(scale)
        near = by_scale[min(by_scale, key=lambda k: abs(k - b))]
        return np.maximum(last, near) if len(last) == n and len(near) == n else None

    def observe(self, key: str, call: int, step: int, n: int | None, width: int, row_errors, masked,
                masked_errors, diverged: bool = False, scale: float = 0.0, offset: int = 0) -> None:
        """Record every row's own error at this key (after its allowance was taken), the set-aside
        rows' included. A diverged key records nothing: its error is not the decision's, and what it
        carries must stay judged downstream (else a fault would widen its consequences' allowance).
        ``offset``: the token of the key's first row (the step's last rows: the earlier rows keep what
        the last key of the width recorded)."""
        if n is None or diverged or not any(f.step <= step for f in self.flips):
            return
        e = np.zeros(n) if row_errors is None or len(row_errors) != n else np.array(row_errors, np.float64)
        for t, v in zip(masked or [], masked_errors if masked_errors is not None else []):
            if t < n:
                e[t] = v
        e = np.where(np.isfinite(e), e, 0.0)
        if offset:
            before = self.inputs.get((step, width), (None, {}))[0]
            full = np.array(before, np.float64) if before is not None and len(before) == n + offset \
                else np.zeros(n + offset)
            full[offset:] = e
            e, n = full, n + offset
        _, by_scale = self.inputs.get((step, width), (None, {}))
        by_scale[_bucket(scale)] = e
        self.inputs[(step, width)] = (e, by_scale)
        self.last[step] = e
        for f in self.flips:
            if f.step == step and f.n_rows == n and f.token < n:
                f.at_key[(key, call)] = float(e[f.token])


def _bucket(scale: float) -> int:
    """Row scales within a factor of 2 are one stream."""
    return int(round(np.log2(scale))) if scale > 0 else -1000

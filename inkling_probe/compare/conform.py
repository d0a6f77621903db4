"""Make a reference and a candidate array comparable element by element, or say why not.

- Equal shapes compare as they are.
- A batch row: with ``cand_row=b`` (or ``ref_row``) the side recorded as a batch (``[B, T, ...]``
  with a batch dim, or tokens flattened ``[B*T, ...]``) is cut to row ``b`` first, so one prompt
  inside a batch of 8 compares against the same prompt run alone.
- Shapes equal once size-1 dims are dropped (``[1, T, H]`` vs ``[T, H]``) compare reshaped.
- Shapes that differ in one dim only (after dropping size-1 dims) compare on the tokens both
  hold: the overlap of ``[token_start, token_start + n)`` on each side when that dim is the
  recorded token dim of both (an ``INKLING_PROBE_TOKENS`` slice), else the common prefix (runs that
  batched differently: the shorter run's tokens are the longer one's first tokens).
- Anything else is a shape mismatch (:class:`ShapeMismatch`).

The token dim is the one each tensor was recorded with (``token_dim`` in the index); nothing is
guessed from shapes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare.values import Values


class ShapeMismatch(ValueError):
    """The two tensors cannot be compared element by element."""


@dataclass
class Conformed:
    ref: Values
    cand: Values
    token_dim: int | None  # the token dim of the conformed arrays (None: unknown)
    note: str = ""  # "" or "tokens 0:16 of 16/32"


def token_dim_of(shape, recorded: int | None) -> int | None:
    """The recorded token dim when it is a dim of ``shape`` (None otherwise)."""
    if not shape or recorded is None or not 0 <= recorded < len(shape):
        return None
    return recorded


def conform(ref: Values, cand: Values, ref_row: dict | None = None, cand_row: dict | None = None,
            ref_batch_row: int | None = None, cand_batch_row: int | None = None) -> Conformed:
    """The two arrays in one shape, or :class:`ShapeMismatch` naming both shapes."""
    ref, ref_row = _batch_row(ref, ref_row, ref_batch_row)
    cand, cand_row = _batch_row(cand, cand_row, cand_batch_row)
    rshape, cshape = ref.array.shape, cand.array.shape
    token_dim = token_dim_of(rshape, (ref_row or {}).get("token_dim", 0))
    if rshape == cshape:
        return Conformed(ref, cand, token_dim)
    if ref.packed or cand.packed:
        raise ShapeMismatch(f"shapes differ: {list(rshape)} vs {list(cshape)} (packed fp4)")
    rs, cs = _squeezed(rshape), _squeezed(cshape)
    if rs == cs:
        return Conformed(ref, Values(cand.array.reshape(rshape), cand.dtype), token_dim)
    if len(rs) == len(cs):
        diff = [i for i, (a, b) in enumerate(zip(rs, cs)) if a != b]
        if len(diff) == 1:
            return _overlap(ref, cand, diff[0], ref_row, cand_row)
    raise ShapeMismatch(f"shapes differ: {list(rshape)} vs {list(cshape)}")


def _batch_row(v: Values, row: dict | None, b: int | None) -> tuple[Values, dict | None]:
    """Row ``b`` of a batched recording: the batch dim's index b, or rows b*T:(b+1)*T of a
    token-flattened one (``meta.batch`` = B); the index row's token dim follows the cut."""
    if b is None or row is None:
        return v, row
    meta = row.get("meta") or {}
    a = v.array
    if meta.get("batch_dim") is not None and a.ndim > meta["batch_dim"]:
        d = meta["batch_dim"]
        if not 0 <= b < a.shape[d]:
            raise ShapeMismatch(f"batch row {b} is outside the batch of {a.shape[d]}")
        cut = np.take(a, [b], axis=d)
        return Values(cut, v.dtype), row
    n_batch = meta.get("batch")
    td = token_dim_of(a.shape, row.get("token_dim", 0))
    if n_batch and td is not None and a.shape[td] % n_batch == 0 and n_batch > 1:
        t = a.shape[td] // n_batch
        if not 0 <= b < n_batch:
            raise ShapeMismatch(f"batch row {b} is outside the batch of {n_batch}")
        return Values(np.take(a, range(b * t, (b + 1) * t), axis=td), v.dtype), row
    return v, row


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(s for s in shape if s != 1)


def _overlap(ref: Values, cand: Values, dim: int, ref_row, cand_row) -> Conformed:
    r = ref.array.reshape(_squeezed(ref.array.shape))
    c = cand.array.reshape(_squeezed(cand.array.shape))
    starts = (0, 0)
    r_tok = _is_token_dim(ref.array.shape, ref_row, dim)
    if r_tok and _is_token_dim(cand.array.shape, cand_row, dim):
        starts = (ref_row.get("token_start", 0), cand_row.get("token_start", 0))
    lo = max(starts)
    hi = min(starts[0] + r.shape[dim], starts[1] + c.shape[dim])
    if hi <= lo:
        raise ShapeMismatch(f"no common tokens: reference {starts[0]}:{starts[0] + r.shape[dim]}, "
                            f"candidate {starts[1]}:{starts[1] + c.shape[dim]}")
    r = np.take(r, range(lo - starts[0], hi - starts[0]), axis=dim)
    c = np.take(c, range(lo - starts[1], hi - starts[1]), axis=dim)
    note = f"tokens {lo}:{hi} of {ref.array.shape[_orig_dim(ref.array.shape, dim)]}/" \
           f"{cand.array.shape[_orig_dim(cand.array.shape, dim)]}"
    return Conformed(Values(r, ref.dtype), Values(c, cand.dtype), dim, note)


def _orig_dim(shape, squeezed_dim: int) -> int:
    """The dim of ``shape`` that is the ``squeezed_dim``-th non-1 dim."""
    seen = -1
    for i, s in enumerate(shape):
        if s != 1:
            seen += 1
            if seen == squeezed_dim:
                return i
    return len(shape) - 1


def _is_token_dim(shape, row: dict | None, squeezed_dim: int) -> bool:
    return row is not None and row.get("token_dim", 0) == _orig_dim(shape, squeezed_dim)

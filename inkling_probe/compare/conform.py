"""Make a reference and a candidate tensor comparable element by element, or say why not.

- Equal shapes compare as they are.
- Shapes equal once size-1 dims are dropped (``[1, T, H]`` vs ``[T, H]``) compare reshaped.
- Shapes that differ in one dim only (after dropping size-1 dims) compare on the tokens both
  hold: the overlap of ``[token_start, token_start + n)`` on each side when that dim is the
  recorded token dim (an ``INKLING_PROBE_TOKENS`` slice), else the common prefix (runs that
  batched differently: the shorter run's tokens are the longer one's first tokens).
- Anything else is a shape mismatch (:class:`ShapeMismatch`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from inkling_probe.compare.values import is_packed_fp4


class ShapeMismatch(ValueError):
    """The two tensors cannot be compared element by element."""


@dataclass
class Conformed:
    ref: torch.Tensor
    cand: torch.Tensor
    token_dim: int | None  # the token dim of the conformed tensors (None: unknown)
    note: str = ""  # "" or "tokens 0:16 of 16/32"


def conform(ref: torch.Tensor, cand: torch.Tensor, ref_row: dict | None = None,
            cand_row: dict | None = None) -> Conformed:
    """The two tensors in one shape, or :class:`ShapeMismatch` naming both shapes."""
    token_dim = _token_dim(ref, ref_row)
    if ref.shape == cand.shape:
        return Conformed(ref, cand, token_dim)
    if is_packed_fp4(ref) or is_packed_fp4(cand):
        raise ShapeMismatch(f"shapes differ: {list(ref.shape)} vs {list(cand.shape)} (packed fp4)")
    rs, cs = _squeezed(ref.shape), _squeezed(cand.shape)
    if rs == cs:
        return Conformed(ref, cand.reshape(ref.shape), token_dim)  # [1, T, H] vs [T, H]: routine, no note
    if len(rs) == len(cs):
        diff = [i for i, (a, b) in enumerate(zip(rs, cs)) if a != b]
        if len(diff) == 1:
            return _overlap(ref.reshape(rs), cand.reshape(cs), diff[0], rs, ref_row, cand_row, ref, cand)
    raise ShapeMismatch(f"shapes differ: {list(ref.shape)} vs {list(cand.shape)}")


def token_dim_of(shape, recorded: int | None) -> int | None:
    """The token dim of a tensor of ``shape`` recorded with ``token_dim=recorded``.

    Module capture records transformers' ``[1, T, ...]`` tensors with the default token dim 0, the
    batch dim: a size-1 dim 0 of a tensor with 3 or more dims is taken as that batch dim, and the
    tokens are dim 1. A ``[1, k]`` tensor is one token.
    """
    if not shape or recorded is None or not 0 <= recorded < len(shape):
        return None
    if recorded == 0 and shape[0] == 1 and len(shape) >= 3:
        return 1
    return recorded


def _token_dim(t: torch.Tensor, row: dict | None) -> int | None:
    return token_dim_of(tuple(t.shape), row.get("token_dim", 0) if row is not None else 0)


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(s for s in shape if s != 1)


def _overlap(r, c, dim, rs, ref_row, cand_row, ref_orig, cand_orig) -> Conformed:
    starts = (0, 0)
    if _is_token_dim(ref_orig, ref_row, rs[dim], dim) and _is_token_dim(cand_orig, cand_row, c.shape[dim], dim):
        starts = (ref_row.get("token_start", 0), cand_row.get("token_start", 0))
    lo = max(starts)
    hi = min(starts[0] + r.shape[dim], starts[1] + c.shape[dim])
    if hi <= lo:
        raise ShapeMismatch(f"no common tokens: reference {starts[0]}:{starts[0] + r.shape[dim]}, "
                            f"candidate {starts[1]}:{starts[1] + c.shape[dim]}")
    r = r.narrow(dim, lo - starts[0], hi - lo)
    c = c.narrow(dim, lo - starts[1], hi - lo)
    note = f"tokens {lo}:{hi} of {ref_orig.shape[_orig_dim(ref_orig.shape, dim)]}/{cand_orig.shape[_orig_dim(cand_orig.shape, dim)]}"
    return Conformed(r, c, dim, note)


def _orig_dim(shape, squeezed_dim: int) -> int:
    """The dim of ``shape`` that is the ``squeezed_dim``-th non-1 dim."""
    seen = -1
    for i, s in enumerate(shape):
        if s != 1:
            seen += 1
            if seen == squeezed_dim:
                return i
    return len(shape) - 1


def _is_token_dim(orig: torch.Tensor, row: dict | None, size: int, squeezed_dim: int) -> bool:
    return row is not None and row.get("token_dim", 0) == _orig_dim(orig.shape, squeezed_dim)

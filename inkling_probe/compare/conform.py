"""Make a reference and a candidate array comparable element by element, or say why not.

- Equal shapes compare as they are.
- A batch row: with ``cand_row=b`` (or ``ref_row``) the side recorded as a batch is cut to row ``b``
  first, so one prompt inside a batch of 8 compares against the same prompt run alone. The index
  says how: a recorded batch dim (``meta.batch_dim``: ``[B, T, ...]``) is cut at index b, tokens
  flattened ``[B*T, ...]`` (``meta.batch`` = B) to rows b*T:(b+1)*T. A tensor recorded with neither
  (no token dim: lm_head's input under generate, the last token only; audio ids) is cut by its
  leading dim when that dim is the batch: the other side holds one row of it (``[1, *rest]`` or
  ``rest``), and the leading dim equals the batch the side's dump recorded elsewhere (``batches``;
  unknown: the row's note says the leading dim was taken as the batch). Two batched sides are cut
  so only where both leading dims are their recorded batches.
- Shapes equal once size-1 dims are dropped (``[1, T, H]`` vs ``[T, H]``) compare reshaped.
- Shapes that differ in one dim only (after dropping size-1 dims) compare on the tokens both
  hold: the overlap of ``[token_start, token_start + n)`` on each side when that dim is the
  recorded token dim of both (an ``INKLING_PROBE_TOKENS`` slice), else the common prefix (runs that
  batched differently: the shorter run's tokens are the longer one's first tokens).
- Anything else is a shape mismatch (:class:`ShapeMismatch`): one line naming both shapes and what
  was tried.

The token dim is the one each tensor was recorded with (``token_dim`` in the index); nothing is
guessed from shapes beyond the leading-dim rule above, which needs the other side's shape to agree.
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


@dataclass
class Rows:
    """Both sides after their batch rows were cut (:func:`batch_rows`)."""

    ref: Values
    cand: Values
    tried: list  # what was tried and did not apply, for a shape mismatch's message
    note: str = ""


def token_dim_of(shape, recorded: int | None) -> int | None:
    """The recorded token dim when it is a dim of ``shape`` (None otherwise)."""
    if not shape or recorded is None or not 0 <= recorded < len(shape):
        return None
    return recorded


def conform(ref: Values, cand: Values, ref_row: dict | None = None, cand_row: dict | None = None,
            ref_batch_row: int | None = None, cand_batch_row: int | None = None,
            batches=(None, None)) -> Conformed:
    """The two arrays in one shape, or :class:`ShapeMismatch` naming both shapes; ``batches``:
    the batch each side's dump recorded (None: unknown)."""
    rows = batch_rows(ref, cand, ref_row, cand_row, ref_batch_row, cand_batch_row, batches)
    ref, cand, tried = rows.ref, rows.cand, rows.tried
    rshape, cshape = ref.array.shape, cand.array.shape
    token_dim = token_dim_of(rshape, (ref_row or {}).get("token_dim", 0))
    if rshape == cshape:
        return Conformed(ref, cand, token_dim, rows.note)
    if ref.packed or cand.packed:
        raise ShapeMismatch(_differ(rshape, cshape, tried + ["packed fp4: nothing else"]))
    rs, cs = _squeezed(rshape), _squeezed(cshape)
    if rs == cs:
        return Conformed(ref, Values(cand.array.reshape(rshape), cand.dtype), token_dim, rows.note)
    tried.append(f"size-1 dims dropped: {list(rs)} vs {list(cs)}")
    if len(rs) == len(cs):
        diff = [i for i, (a, b) in enumerate(zip(rs, cs)) if a != b]
        if len(diff) == 1:
            conf = _overlap(ref, cand, diff[0], ref_row, cand_row)
            conf.note = "; ".join(x for x in (rows.note, conf.note) if x)
            return conf
        tried.append(f"{len(diff)} dims differ (a token overlap needs one)")
    else:
        tried.append("different ranks")
    raise ShapeMismatch(_differ(rshape, cshape, tried))


def _differ(rshape, cshape, tried: list) -> str:
    return f"shapes differ: {list(rshape)} vs {list(cshape)}" + (f"; tried: {', '.join(tried)}" if tried else "")


def batch_rows(ref: Values, cand: Values, ref_row: dict | None, cand_row: dict | None,
               ref_b: int | None, cand_b: int | None, batches=(None, None)) -> Rows:
    """Each side cut to its batch row (the module docstring's rules); a side the index describes
    (batch dim, flattened tokens) first, then the leading-dim rule against the other side."""
    ref, ref_cut = _indexed_row(ref, ref_row, ref_b)
    cand, cand_cut = _indexed_row(cand, cand_row, cand_b)
    out = Rows(ref, cand, [])
    ref_lead, cand_lead = ref_b is not None and not ref_cut, cand_b is not None and not cand_cut
    if ref_lead and cand_lead:
        _both_leading(out, ref_b, cand_b, batches)
    elif ref_lead:
        _one_leading(out, "reference", ref_b, batches[0])
    elif cand_lead:
        _one_leading(out, "candidate", cand_b, batches[1])
    return out


def _indexed_row(v: Values, row: dict | None, b: int | None) -> tuple[Values, bool]:
    """Row ``b`` by what the index says: the batch dim's index b, or rows b*T:(b+1)*T of a
    token-flattened one (``meta.batch`` = B); (v, False) when the index says neither."""
    if b is None:
        return v, False
    meta = (row or {}).get("meta") or {}
    a = v.array
    if meta.get("batch_dim") is not None and a.ndim > meta["batch_dim"]:
        d = meta["batch_dim"]
        _inside(b, a.shape[d])
        return Values(np.take(a, [b], axis=d), v.dtype), True
    n_batch = meta.get("batch")
    td = token_dim_of(a.shape, (row or {}).get("token_dim", 0))
    if n_batch and td is not None and a.shape[td] % n_batch == 0 and n_batch > 1:
        t = a.shape[td] // n_batch
        _inside(b, n_batch)
        return Values(np.take(a, range(b * t, (b + 1) * t), axis=td), v.dtype), True
    return v, False


def _inside(b: int, n: int) -> None:
    if not 0 <= b < n:
        raise ShapeMismatch(f"batch row {b} is outside the batch of {n}")


def _one_leading(out: Rows, label: str, b: int, batch: int | None) -> None:
    """Cut ``label``'s side by its leading dim when the other side is one row of it."""
    mine, other = (out.ref, out.cand) if label == "reference" else (out.cand, out.ref)
    s, o = mine.array.shape, other.array.shape
    if s == o:  # nothing to align (a tensor that does not grow with the batch)
        return
    why = _not_leading(s, batch) or (None if o in (s[1:], (1, *s[1:])) else f"the other side {list(o)} is "
                                     f"not one row of it")
    if why:
        out.tried.append(f"{label} row {b} by its leading dim: {why}")
        return
    _inside(b, s[0])
    setattr(out, "ref" if label == "reference" else "cand", Values(mine.array[b:b + 1], mine.dtype))
    if batch is None:
        out.note = f"{label} row {b} of its leading dim {s[0]} (taken as the batch: none recorded)"


def _both_leading(out: Rows, ref_b: int, cand_b: int, batches) -> None:
    """Both sides batched, neither described by the index: cut both only where each leading dim is
    its recorded batch and the rest of the shapes agree."""
    r, c = out.ref.array.shape, out.cand.array.shape
    why = _not_leading(r, batches[0], True) or _not_leading(c, batches[1], True) or (
        None if r[1:] == c[1:] else "the shapes after the leading dims differ")
    if why:
        if r != c:
            out.tried.append(f"rows {ref_b}/{cand_b} by the leading dims: {why}")
        return
    _inside(ref_b, r[0])
    _inside(cand_b, c[0])
    out.ref, out.cand = Values(out.ref.array[ref_b:ref_b + 1], out.ref.dtype), \
        Values(out.cand.array[cand_b:cand_b + 1], out.cand.dtype)


def _not_leading(shape, batch: int | None, known: bool = False) -> str | None:
    """Why ``shape``'s leading dim is not taken as the batch (None: it is)."""
    if not shape:
        return "a scalar has no batch"
    if batch is None:
        return "no batch recorded" if known else None
    return None if shape[0] == batch else f"leading dim {shape[0]} is not the batch of {batch}"


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

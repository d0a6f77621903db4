"""Attention masks compared by meaning: which positions are masked, whatever the representation.

Engines hand the same mask in different forms: SDPA a boolean ``[B, 1, T, S]`` (True = attend), eager
attention an additive float one (0 = attend, ``finfo(dtype).min`` or ``-inf`` = masked), some a
``[T, S]`` shared by every row and head. Compared as values these read as totally different (rel_rms 1)
and the mask is named the culprit while the fault behind it goes unseen. So a mask pair is reduced to
one canonical form, a boolean "masked" tensor, and compared position by position:

- **Recognised** from the index when the key's last name holds ``mask`` (``in.attention_mask``,
  ``causal_mask``) or one side is bool and the other not; then from the values, on both sides:
  bool; integers of {0, 1} (1 = attend: transformers' padding masks); floats that are all 0 or ``<= NEG`` (additive). Anything
  else (a soft bias: ALiBi, relative positions; a float 1/0 keep-mask, which an all-zero additive
  mask could not be told from) is no mask and is compared as values.
- **Convention** of a boolean mask: True = attend (torch SDPA, transformers), unless its own values
  say otherwise: where it has query and key dims (``[.., T, S]``, 3+ dims or square) and most of its
  self positions (query i, key ``S - T + i``: attended by every causal, sliding or padded mask short
  of a fully padded row) are False, True = masked. Read per side, never from the other side.
- **Shapes** broadcast as attention broadcasts them (``[B, 1, T, S]`` vs ``[B, H, T, S]`` vs
  ``[T, S]``); a batch row (``--cand-row``) is cut first; what does not broadcast goes through
  :func:`~.conform.conform` (size-1 dims, token overlap), else it is a shape row saying so.
- **Verdict**: the same masked positions are ``exact``; any other is a divergence whose note says at
  how many positions and the first, and whose metrics read as the non-finite mismatch it is (0
  against -inf in additive form): every metric's error is inf, whatever the threshold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare.conform import ShapeMismatch, batch_rows, conform
from inkling_probe.compare.metrics import Metrics
from inkling_probe.compare.values import Values, unravel

NEG = -1e4  # an additive mask's masked value is <= this (BERT's -10000, fp16's finfo.min, -1e9, -inf):
# exp(NEG) is 0 in every float format, so a softmax cannot tell these apart


@dataclass
class Masks:
    """Two masks compared by meaning: ``differ`` positions masked on one side only, of ``numel``."""

    numel: int
    differ: int
    first: list | None  # the first differing position (broadcast shape), None when equal
    ref_masked: int
    cand_masked: int
    note: str


def named(key: str) -> bool:
    """A key whose last name says mask (``model.layers.0.self_attn.in.attention_mask``)."""
    return "mask" in key.rsplit(".", 1)[-1].lower()


def candidates(ref_key: str, ref_dtype: str, cand_key: str, cand_dtype: str) -> bool:
    """Worth reading as masks, from the index alone: a mask's name, or bool against another dtype."""
    return named(ref_key) or named(cand_key) or ((ref_dtype == "bool") != (cand_dtype == "bool"))


def read(v: Values) -> tuple[np.ndarray, str] | None:
    """(masked [same shape] bool, how it was read) of a mask's values, or None: not a mask."""
    a = v.array
    if v.packed or a.dtype.kind == "c":
        return None
    if a.dtype == bool:
        return _bool(a, "bool")
    if a.dtype.kind in "iu":
        ok = a.size == 0 or np.isin(a, (0, 1)).all()
        return (a == 0, f"{a.dtype.name} (1 = attend)") if ok else None
    if a.dtype.kind != "f":
        return None
    zero = a == 0
    if not (zero | (a <= NEG)).all():  # NaN is neither: no mask
        return None
    return ~zero, f"{v.dtype} additive"


def _bool(attend: np.ndarray, what: str) -> tuple[np.ndarray, str]:
    """The masked positions of a boolean-like mask, its convention read from its self positions."""
    if _self_attended(attend) is False:
        return attend, f"{what} (True = masked, by its diagonal)"
    return ~attend, f"{what} (True = attend)"


def _self_attended(attend: np.ndarray) -> bool | None:
    """Whether most self positions are True (None: no query and key dims to tell)."""
    if attend.ndim < 2:
        return None
    t, s = attend.shape[-2:]
    if t < 2 or s < t or (attend.ndim == 2 and t != s):  # [B, S] padding masks: no query dim
        return None
    i = np.arange(t)
    diag = attend[..., i, s - t + i]  # [..., T]
    return bool(diag.mean() >= 0.5)


def compare_masks(ref: Values, cand: Values, ref_row: dict | None = None, cand_row: dict | None = None,
                  ref_batch_row: int | None = None, cand_batch_row: int | None = None,
                  batches=(None, None)) -> Masks | None:
    """The two masks compared by meaning, or None when either side's values are no mask; a batch
    row is cut first (:func:`~.conform.conform`'s rules); :class:`ShapeMismatch` when the shapes
    neither broadcast nor conform."""
    r, c = read(ref), read(cand)
    if r is None or c is None:
        return None
    (rm, r_how), (cm, c_how) = r, c
    rows = batch_rows(Values(rm, "bool"), Values(cm, "bool"), ref_row, cand_row, ref_batch_row, cand_batch_row,
                      batches)
    rm, cm = rows.ref.array, rows.cand.array
    try:
        shape = np.broadcast_shapes(rm.shape, cm.shape)
    except ValueError:
        try:
            conf = conform(rows.ref, rows.cand, ref_row, cand_row)  # size-1 dims, a token overlap
        except ShapeMismatch as e:
            raise ShapeMismatch("; ".join([str(e), *rows.tried, "masks: the shapes do not broadcast"])) from None
        rm, cm = conf.ref.array, conf.cand.array
        shape = rm.shape
    rb, cb = np.broadcast_to(rm, shape), np.broadcast_to(cm, shape)
    diff = rb != cb
    n, differ = int(np.prod(shape)), int(np.count_nonzero(diff))
    how = f"reference {r_how}, candidate {c_how}" + (
        f"; broadcast {list(ref.array.shape)} vs {list(cand.array.shape)}" if ref.array.shape != cand.array.shape else "")
    how += f"; {rows.note}" if rows.note else ""
    if not differ:
        same = ref.array.dtype == cand.array.dtype and np.array_equal(ref.array, cand.array)
        return Masks(n, 0, None, int(rb.sum()), int(cb.sum()), "" if same else f"masks equal by meaning ({how})")
    first = unravel(int(np.argmax(diff.reshape(-1))), shape)
    side = "reference" if rb[tuple(first)] else "candidate"
    note = f"mask differs at {differ} of {n} positions (first at {first}: masked in the {side} only; {how})"
    return Masks(n, differ, first, int(rb.sum()), int(cb.sum()), note)


def metrics(m: Masks) -> Metrics:
    """The pair's metrics: exact, or the non-finite mismatch of 0 against -inf at ``m.differ``
    positions (rel_rms, max_abs inf, sqnr -inf, cosine NaN, mismatch the differing fraction)."""
    out = Metrics(numel=m.numel, ref_inf=m.ref_masked, cand_inf=m.cand_masked)
    if m.differ:
        frac = m.differ / max(m.numel, 1)
        out.rel_rms = out.max_abs = float("inf")
        out.max_abs_index, out.sqnr_db, out.cosine = m.first, float("-inf"), float("nan")
        out.outside = out.mismatch = frac
        out.nonfinite_mismatch = m.differ
    return out

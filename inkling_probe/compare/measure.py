"""Measure one aligned pair: load both tensors, conform their shapes, set aside routing flips,
compute the metrics. One pair is in memory at a time (the streaming unit of compare).

Integer and bool keys (top-k expert ids, masks) are decisions: their error is the fraction of
token rows that changed, and the rows that changed are set aside in the later keys of the same
layer and step that have as many token rows (a token routed to other experts is expected to
differ there; it is counted in the decision key, not again in every key after it). The set-aside
rows take the reference's values, so indices stay those of the recorded tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from inkling_probe.compare.align import Entry
from inkling_probe.compare.conform import ShapeMismatch, conform, token_dim_of
from inkling_probe.compare.metrics import Metrics, compare_tensors
from inkling_probe.compare.values import is_packed_fp4
from inkling_probe.errors import ProbeError


@dataclass
class Measured:
    status: str  # exact | ok | shape | unreadable   (ok may still diverge: the caller decides)
    metrics: Metrics | None = None
    error: float | None = None
    note: str = ""
    changed_rows: list[int] | None = None  # decision keys: token rows that changed
    token_rows: int | None = None  # number of token rows (for matching set-aside rows)
    masked: list[int] | None = None  # rows set aside here


def same_bits(a: Entry, b: Entry) -> bool:
    """Bit-identical by the index alone (hashes of every rank's shard)."""
    sig = lambda e: sorted((r["rank"], r["shape"], r["dtype"], r["shard"], r["hash"]) for r in e.rows)
    return all(r["hash"] for r in a.rows + b.rows) and sig(a) == sig(b)


def is_decision(dtype_name: str) -> bool:
    return dtype_name.startswith(("int", "uint", "bool")) and dtype_name != "uint8"


def load(dump, e: Entry) -> torch.Tensor:
    return dump.tensor(e.key, step=e.step, call=e.call)


def measure(ref_dump, ref: Entry, cand_dump, cand: Entry, metric: str, rtol: float,
            set_aside=lambda n: None) -> Measured:
    """The pair's metrics; ``set_aside(n_rows)`` gives token rows to set aside (or None)."""
    if same_bits(ref, cand):
        n = ref.first["numel"]
        if not is_decision(ref.dtype):
            return Measured("exact", Metrics(numel=n), 0.0)
        return Measured("exact", Metrics(numel=n), 0.0, changed_rows=[], token_rows=_token_rows(ref))
    try:
        r, c = load(ref_dump, ref), load(cand_dump, cand)
    except ProbeError as e:
        return Measured("unreadable", note=str(e).splitlines()[0])
    try:
        conf = conform(r, c, ref.first, cand.first)
    except ShapeMismatch as e:
        return Measured("shape", note=str(e))
    r, c, td, note = conf.ref, conf.cand, conf.token_dim, conf.note
    del conf
    if is_decision(ref.dtype) and is_decision(cand.dtype):
        out = _decision(r, c, td, rtol)
        out.note = note
        return out
    out = Measured("ok", note=note)
    if td is not None and not is_packed_fp4(c) and r.dim():
        out.token_rows = r.shape[td]
        rows = set_aside(r.shape[td])
        if rows:
            c = c.clone()
            idx = torch.tensor(rows)
            c.index_copy_(td, idx, r.index_select(td, idx).to(c.dtype))
            out.masked = rows
    atol = rtol * float(ref.first.get("rms") or 0.0)
    out.metrics = compare_tensors(r, c, atol=atol, rtol=rtol)
    out.error = out.metrics.error(metric)
    return out


def _token_rows(e: Entry) -> int | None:
    """Token rows of an entry from the index alone."""
    shape = e.global_shape()
    d = token_dim_of(shape, e.first.get("token_dim", 0))
    return shape[d] if d is not None else None


def _decision(r: torch.Tensor, c: torch.Tensor, td: int | None, rtol: float) -> Measured:
    m = compare_tensors(r, c, atol=0.0, rtol=0.0)
    if td is None or r.dim() == 0:
        return Measured("ok", m, m.mismatch, changed_rows=None)
    differs = (r != c)
    dims = [i for i in range(r.dim()) if i != td]
    changed = (differs.any(dim=dims) if dims else differs).nonzero().flatten().tolist()
    n = r.shape[td]
    m.extra["changed_rows"] = changed
    return Measured("ok", m, len(changed) / n if n else 0.0, changed_rows=changed, token_rows=n)

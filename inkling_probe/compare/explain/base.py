"""What every hypothesis shares: its context, its finding, and residual errors in float64."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Context:
    """What a hypothesis may know besides the two tensors.

    ``noise`` is the residual rel_rms at or below which a hypothesis explains the difference (the
    key's divergence threshold, when explain runs inside compare). ``routing`` holds the
    reference's expert ids per token (``[T, k]``) for the layer, when it was recorded.
    """

    noise: float = 1e-5
    token_dim: int | None = 0
    tp_sizes: tuple[int, ...] = ()
    head_dim: int | None = None
    routing: torch.Tensor | None = None
    ref_dtype: torch.dtype | None = None
    cand_dtype: torch.dtype | None = None


@dataclass
class Finding:
    """A hypothesis that holds: its name, a one-line summary and the numbers behind it."""

    name: str
    summary: str
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"hypothesis": self.name, "summary": self.summary, "evidence": self.evidence}


def rel(ref: torch.Tensor, cand: torch.Tensor) -> float:
    """rel_rms in float64 over positions finite on both sides (0/0 = 0, x/0 = inf)."""
    both = torch.isfinite(ref) & torch.isfinite(cand)
    r, c = ref[both], cand[both]
    num, den = float((c - r).square().sum().sqrt()), float(r.square().sum().sqrt())
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def short_list(items, limit: int = 16) -> str:
    """'[2, 5]' or '[0, 1, ... 37 more]'."""
    items = list(items)
    if len(items) <= limit:
        return str(items)
    return str(items[:limit])[:-1] + f", ... {len(items) - limit} more]"


def fmt_num(x: float) -> str:
    return f"{x:.6g}"

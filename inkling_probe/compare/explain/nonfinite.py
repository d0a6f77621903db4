"""NaN/Inf onset: where the candidate (or the reference) stops being finite."""
from __future__ import annotations

import torch

from inkling_probe.compare.explain.base import Context, Finding, short_list
from inkling_probe.compare.values import unravel


def nonfinite(ref: torch.Tensor, cand: torch.Tensor, ctx: Context) -> list[Finding]:
    out = []
    for side, x, other in (("candidate", cand, ref), ("reference", ref, cand)):
        bad = ~torch.isfinite(x) & torch.isfinite(other)
        n = int(bad.sum())
        if not n:
            continue
        flat = bad.reshape(-1)
        first = unravel(int(flat.nonzero()[0, 0]), x.shape)
        nan = int((torch.isnan(x) & bad).sum())
        ev = {"side": side, "count": n, "nan": nan, "inf": n - nan, "first_index": first}
        rows = []
        if ctx.token_dim is not None and x.dim() > ctx.token_dim:
            dims = [i for i in range(x.dim()) if i != ctx.token_dim]
            rows = (bad.any(dim=dims) if dims else bad).nonzero().flatten().tolist()
            ev["token_rows"] = rows
        where = f", token rows {short_list(rows)}" if rows else ""
        out.append(Finding("nonfinite", f"{side} non-finite where the other is finite: {n} values "
                           f"({nan} NaN, {n - nan} Inf), first at {first}{where}", ev))
    return out

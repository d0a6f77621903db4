"""Routing decisions (top-k expert ids): which tokens changed, and which changes are near-ties.

A key is a decision when declared so: ``probe(name, ids, kind="decision")`` (optionally with
``scores="<key of the router scores>"``), or a ``decisions`` glob in the name map (shipped for
transformers' MoE routers). Integer type alone never makes a decision (``position_ids`` are not).

- A token's decision is the *set* of its experts: ids in another order (``topk(sorted=False)``)
  are the same decision.
- A changed token is a **near-tie** when, for every expert ``a`` swapped out for ``b``, the
  router's scores moved towards the new choice (``dS[b] - dS[a] > 0``: noise in the router's input
  can flip such a choice, and says nothing about the router) and, where the scores are the very
  scores the choice is made on (``selection=True`` in the decision's meta), the reference's gap was
  within that move (``|S_ref[a] - S_ref[b]| <= TIE_K * (|dS[a]| + |dS[b]|)``). With logits that
  feed a biased or transformed choice (sigmoid + correction bias), the gap in logits says nothing
  of the choice's margin, so only the direction is tested. Other changes are **clear-margin**
  flips: the choice changed against its scores (or with scores unchanged), which only a broken
  router, bias or top-k does.
- Without scores a change cannot be classed; it is counted as unclassified (docs/COMPARE.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TIE_K = 1.5


@dataclass
class Decision:
    """What changed between two decision tensors with token rows first."""

    token_rows: int
    changed: list[int] = field(default_factory=list)
    near_tie: list[int] = field(default_factory=list)
    clear: list[int] = field(default_factory=list)
    unclassified: list[int] = field(default_factory=list)
    margins: dict = field(default_factory=dict)  # token -> (reference gap, score noise)

    def note(self) -> str:
        if not self.changed:
            return ""
        parts = [f"{len(self.changed)} of {self.token_rows} token(s) routed differently"]
        if self.near_tie:
            parts.append(f"{len(self.near_tie)} near-tie")
        if self.clear:
            parts.append(f"{len(self.clear)} clear-margin {self.clear[:8]}")
        if self.unclassified:
            parts.append(f"{len(self.unclassified)} unclassified (no router scores)")
        return ", ".join(parts)


def as_sets(ids: np.ndarray) -> np.ndarray:
    """``[T, ...]`` ids -> ``[T, k]`` sorted per token (order-free decisions)."""
    flat = ids.reshape(ids.shape[0], -1) if ids.ndim > 1 else ids.reshape(-1, 1)
    return np.sort(flat, axis=1)


def classify(ref_ids: np.ndarray, cand_ids: np.ndarray, ref_scores: np.ndarray | None = None,
             cand_scores: np.ndarray | None = None, selection: bool = False) -> Decision:
    """Compare decisions token by token (token rows first); scores ``[T, E]`` when known."""
    r, c = as_sets(ref_ids), as_sets(cand_ids)
    out = Decision(token_rows=r.shape[0])
    out.changed = np.flatnonzero((r != c).any(axis=1)).tolist()
    usable = _usable(ref_scores, cand_scores, r)
    for t in out.changed:
        if not usable:
            out.unclassified.append(t)
            continue
        if c[t].min() < 0 or c[t].max() >= ref_scores.shape[1]:  # an id no router score belongs to: a broken id
            out.margins[t] = (float("inf"), 0.0)
            out.clear.append(t)
            continue
        tie, gap, noise = _near_tie(set(r[t].tolist()), set(c[t].tolist()), ref_scores[t], cand_scores[t],
                                    selection)
        out.margins[t] = (gap, noise)
        (out.near_tie if tie else out.clear).append(t)
    return out


def _usable(rs, cs, ids) -> bool:
    if rs is None or cs is None or rs.shape != cs.shape or rs.ndim != 2 or rs.shape[0] != ids.shape[0]:
        return False
    return ids.size == 0 or (ids.min() >= 0 and ids.max() < rs.shape[1])


def _near_tie(ref_set, cand_set, s_ref, s_cand, selection: bool) -> tuple[bool, float, float]:
    """(near-tie?, largest reference gap among swapped pairs, the noise that gap was held to)."""
    moved = np.asarray(s_cand, np.float64) - np.asarray(s_ref, np.float64)  # [E]
    d = np.abs(moved)
    worst_gap, worst_noise, tie = 0.0, 0.0, True
    for a in ref_set - cand_set:
        for b in cand_set - ref_set:
            gap = abs(float(s_ref[a]) - float(s_ref[b]))
            noise = TIE_K * (float(d[a]) + float(d[b]))
            towards_b = float(moved[b]) - float(moved[a]) > 0
            if not towards_b or (selection and gap > noise):
                tie = False
            if gap - noise >= worst_gap - worst_noise:
                worst_gap, worst_noise = gap, noise
    return tie, worst_gap, worst_noise

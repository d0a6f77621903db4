"""Token x layer error from two dumps, with numpy alone (no torch): the heatmap's numbers.

For each layer the last compared row of the step (the residual stream the next layer reads) is read
from both dumps, its token axis found, and rel_rms = ||c_t - r_t|| / ||r_t|| taken per token in
float64. Layers are the ``layer`` of the compare rows (rows outside any layer, e.g. ``embed`` and
``logits``, are kept as their own lines).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.views.doc import as_doc, culprits, rows


@dataclass
class TokenErrors:
    """``errors[i, t]``: per-token rel_rms of ``keys[i]`` (NaN where a token is missing)."""

    keys: list[str]
    labels: list[str]
    layers: list  # the layer of each line (None outside layers)
    errors: np.ndarray  # [lines, tokens]
    step: int


def layer_rows(doc: dict, step: int) -> list[dict]:
    """One row per layer (its last readable row in execution order), plus rows outside layers."""
    picked: dict = {}
    for r in rows(doc, step):
        if r.get("against", "reference") != "reference" or r.get("status") in ("unreadable", "skipped", "shape"):
            continue
        slot = ("layer", r["layer"]) if r.get("layer") is not None else ("key", r["key"])
        picked[slot] = r  # later rows of a layer replace earlier ones
    return list(picked.values())


def token_errors(report, ref, cand, step: int | None = None, max_tokens: int = 512) -> TokenErrors:
    """Per-token error of each layer's output for ``step`` (default: the first culprit's step)."""
    doc = as_doc(report)
    if step is None:
        ranked = culprits(doc)
        step = ranked[0]["step"] if ranked else 0
    keys, labels, layers, lines = [], [], [], []
    for r in layer_rows(doc, step):
        per_token = _per_token(ref, cand, r)
        if per_token is None:
            continue
        keys.append(r["key"])
        layers.append(r.get("layer"))
        labels.append(f"L{r['layer']} {r['key'].rsplit('.', 1)[-1]}" if r.get("layer") is not None else r["key"])
        lines.append(per_token[:max_tokens])
    width = max((len(v) for v in lines), default=0)
    errors = np.full((len(lines), width), np.nan)
    for i, v in enumerate(lines):
        errors[i, : len(v)] = v
    return TokenErrors(keys, labels, layers, errors, step)


def _per_token(ref, cand, row: dict) -> np.ndarray | None:
    step, call = row.get("step", 0), row.get("call", 0)
    r_key, c_key = row.get("ref_key") or row["key"], row.get("cand_key") or row["key"]
    try:
        r, c = ref.array(r_key, step, call=call), cand.array(c_key, step, call=call)
        token_dim = cand.rows(c_key, step, call)[0].get("token_dim", 0)
    except Exception:  # noqa: BLE001 - a key one dump cannot give (stats only, fp4 bytes) is left out
        return None
    if r.dtype.kind not in "fc" or c.dtype.kind not in "fc":
        return None
    r, c, token_dim = _same_rank(r, c, token_dim)
    r, c = np.moveaxis(r, token_dim, 0), np.moveaxis(c, token_dim, 0)
    n = min(len(r), len(c))  # the common tokens when the runs batched differently
    if n == 0 or r[:n].shape != c[:n].shape:
        return None
    r, c = r[:n].reshape(n, -1).astype(np.float64), c[:n].reshape(n, -1).astype(np.float64)
    norm = np.sqrt((r * r).sum(1))
    diff = np.sqrt(((c - r) ** 2).sum(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norm > 0, diff / norm, np.where(diff > 0, np.inf, 0.0))


def _same_rank(r: np.ndarray, c: np.ndarray, token_dim: int):
    """Leading size-1 dims (a batch of one) dropped from the side that has more dims."""
    while r.ndim > c.ndim and r.shape[0] == 1:
        r = r[0]
    while c.ndim > r.ndim and c.shape[0] == 1:
        c, token_dim = c[0], token_dim - 1
    if c.ndim == 0:
        return r.reshape(1), c.reshape(1), 0
    return r, c, token_dim if 0 <= token_dim < c.ndim else 0

"""Fusion: tower rows scattered into the *normed* text embeddings at their placeholder rows.

``h[rows of image i] = image rows of i`` (then audio), with explicit indices from
:func:`processor.media_layout` (transformers' ``masked_scatter`` at ``image_token_id`` /
``audio_token_id``, in the same order) and no norm afterwards. Probe: ``fused`` ([T, H], the
decoder's input), with ``media`` meta: ``[[kind, item, first row, rows], ...]``.

Planted fault ``renorm_fused_rows`` (faults.py, the bring-up's "image not visible"): the image rows
are RMS-normalised again after the scatter (each row scaled to unit rms): born at ``fused``.
"""

from __future__ import annotations

import torch

import inkling_probe
from inkling_model.switches import faults


def fuse(h: torch.Tensor, layout: list[list], image: torch.Tensor | None, audio: torch.Tensor | None,
         eps: float = 1e-6) -> torch.Tensor:
    """Scatter tower rows ``image [Ni, H]`` / ``audio [Na, H]`` into ``h [T, H]`` at ``layout``'s rows."""
    h = h.clone()
    taken = {"image": 0, "audio": 0}
    feats = {"image": image, "audio": audio}
    for kind, _, first, n in layout:
        src = feats[kind]
        h[first:first + n] = src[taken[kind]:taken[kind] + n].to(h.dtype)
        taken[kind] += n
    for kind, src in feats.items():
        have = 0 if src is None else src.shape[0]
        if taken[kind] != have:
            raise ValueError(f"{have} {kind} feature rows for {taken[kind]} {kind} placeholder rows")
    if faults.is_active("renorm_fused_rows"):
        rows = torch.tensor([r for kind, _, a, n in layout if kind == "image" for r in range(a, a + n)],
                            dtype=torch.long, device=h.device)
        x = h[rows].float()
        h[rows] = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)
    inkling_probe.probe("fused", h, media=layout)
    return h

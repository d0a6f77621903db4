"""The hMLP vision tower (transformers' InklingVisionModel), replicated on every TP rank.

A patch ``[T=2 frames, P, P, C]`` is folded time/space-to-depth stage by stage: each layer folds
``t_fold x hw_fold x hw_fold`` neighbours into the channel dim, projects (no bias), then RMSNorm and
GELU (all layers but the last, which projects to the text width). :func:`plan_out_scales` decides
each stage's (t, h, w, c) grid; ``final_norm`` closes the tower. One token row per patch.
Probes: ``vision.layers.<i>`` (each layer's output, ``[N, t, h, w, c]``), ``vision.out`` ([N, D]).

Planted fault ``vision_fold_order`` (faults.py): the space-to-depth fold stacks its neighbours in
(w, h) order instead of (h, w): born at the first layer that folds space, ``vision.layers.0``.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

import inkling_probe
from inkling_model.layers.loading import make_param, replicated_loader
from inkling_model.layers.norm import RMSNorm
from inkling_model.switches import faults

from .config import VisionConfig


def prime_factors(n: int) -> list[int]:
    """Prime factors of n in ascending order (transformers' helper)."""
    out, p = [], 2
    while n % 2 == 0:
        out.append(2)
        n //= 2
    for p in range(3, math.isqrt(n) + 1, 2):
        while n % p == 0:
            out.append(p)
            n //= p
    return out + ([n] if n > 1 else [])


def _scales(t_patch: int, patch: int, channels: int) -> list[tuple[int, int, int, int]]:
    h = list(itertools.accumulate(prime_factors(patch)[::-1], lambda a, b: a * b))
    t = list(itertools.accumulate(prime_factors(t_patch)[::-1], lambda a, b: a * b))
    out = [(1, 1, 1, channels)]
    out += [(1, s, s, math.ceil(s * s * channels / 64) * 64) for s in h]
    # transformers multiplies by 64 without dividing first: kept, it only sizes intermediate stages
    out += [(s, h[-1], h[-1], math.ceil(h[-1] ** 2 * channels * s) * 64) for s in t]
    return out


def plan_out_scales(t_patch: int, patch: int, n_layers: int, channels: int) -> list[tuple[int, int, int, int]]:
    """The (t, h, w, c) grid after each of ``n_layers`` stages (n_layers + 1 entries), as transformers
    plans it: each stage takes the scale closest (in log size) to an even log-spaced ladder; with fewer
    layers than scales, the cheapest assignment of distinct scales (brute force, as scipy's
    linear_sum_assignment; scipy is not needed)."""
    scales = _scales(t_patch, patch, channels)
    size = [math.log(a * b * c) for a, b, c, _ in scales]
    top = math.log(patch * patch * t_patch * channels)
    ideal = [top * i / n_layers for i in range(n_layers + 1)]
    cost = [[abs(x - s) for s in size] for x in ideal]
    if n_layers >= len(scales):
        idx = [min(range(len(scales)), key=lambda j, r=r: (r[j], j)) for r in cost]
    else:  # scipy's linear_sum_assignment: each stage a distinct scale, least total cost
        best = min(itertools.permutations(range(len(scales)), n_layers + 1),
                   key=lambda cols: sum(cost[i][j] for i, j in enumerate(cols)))
        idx = list(best)
    idx[0], idx[-1] = 0, len(scales) - 1
    return [scales[j] for j in idx]


def fold_timespace_to_depth(x: torch.Tensor, t_fold: int, hw_fold: int) -> torch.Tensor:
    """[B, T, H, W, C] -> [B, T/t, H/hw, W/hw, t*hw*hw*C], neighbours stacked (t, h, w, C)-major."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // t_fold, t_fold, h // hw_fold, hw_fold, w // hw_fold, hw_fold, c)
    order = (0, 1, 3, 5, 2, 6, 4, 7) if faults.is_active("vision_fold_order") else (0, 1, 3, 5, 2, 4, 6, 7)
    x = x.permute(*order)  # [B, T/t, H/hw, W/hw, t, hw, hw, C]
    return x.reshape(b, t // t_fold, h // hw_fold, w // hw_fold, t_fold * hw_fold * hw_fold * c)


class VisionLayer(nn.Module):
    """One hMLP stage: fold, project, then (all but the last) RMSNorm and GELU."""

    def __init__(self, in_dim: int, out_dim: int, t_fold: int, hw_fold: int, last: bool, eps: float):
        super().__init__()
        self.t_fold, self.hw_fold, self.last = t_fold, hw_fold, last
        self.weight = make_param((out_dim, in_dim), replicated_loader)
        self.norm = None if last else RMSNorm(out_dim, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.t_fold > 1 or self.hw_fold > 1:
            x = fold_timespace_to_depth(x, self.t_fold, self.hw_fold)
        x = F.linear(x, self.weight)  # [N, t, h, w, out]
        if self.norm is not None:
            x = F.gelu(self.norm(x))
        return x


class VisionTower(nn.Module):
    """pixel_values [N, T, P, P, C] (one row per patch) -> image rows [N, text hidden]."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.config = config
        self.scales = plan_out_scales(config.temporal_patch_size, config.patch_size,
                                      config.num_hidden_layers, config.num_channels)
        n = config.num_hidden_layers
        layers = []
        for i, (a, b) in enumerate(zip(self.scales[:-1], self.scales[1:])):
            mult = (b[0] // a[0]) * (b[1] // a[1]) * (b[2] // a[2])
            out = config.text_hidden_size if i == n - 1 else b[3]
            layers.append(VisionLayer(a[3] * mult, out, b[0] // a[0], b[1] // a[1], i == n - 1, config.rms_norm_eps))
        self.layers = nn.ModuleList(layers)
        self.final_norm = RMSNorm(config.text_hidden_size, config.rms_norm_eps)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        c = self.config
        want = (c.temporal_patch_size, c.patch_size, c.patch_size, c.num_channels)
        if pixel_values.dim() != 5 or tuple(pixel_values.shape[1:]) != want:
            raise ValueError(f"pixel_values must be [N, {', '.join(map(str, want))}], got {tuple(pixel_values.shape)}")
        x = pixel_values.to(self.final_norm.weight.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x)  # [N, t, h, w, c_i]
            inkling_probe.probe(f"vision.layers.{i}", x)
        x = self.final_norm(x).reshape(x.shape[0], -1)  # [N, D]
        inkling_probe.probe("vision.out", x)
        return x

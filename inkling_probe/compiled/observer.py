"""The observer effect: did recording change what the compiled model computes?

A probe makes a tensor exist that Inductor might have kept in registers inside a fusion (in fp32,
where the model's dtype is bf16): the recorded program can compute other bits than the unrecorded
one. :func:`effect` compares the compiled model's outputs (logits) with probes off and on; narrowing
the probe set (``include``/``exclude``: an excluded name leaves no node) is how a user finds a set
that changes nothing, and the line says which it is.
"""
from __future__ import annotations

import math


def effect(off, on) -> dict:
    """Bit-identical or by how much: ``{"identical", "max_abs", "rel_rms", "differ", "numel", "dtype"}``."""
    import torch

    a, b = off.detach().double().cpu(), on.detach().double().cpu()
    if a.shape != b.shape:
        raise ValueError(f"outputs with probes off {tuple(a.shape)} and on {tuple(b.shape)} differ in shape")
    diff = (b - a).abs()
    ref = float(a.pow(2).sum().sqrt())
    return {"identical": bool(torch.equal(off, on)), "max_abs": float(diff.max()) if diff.numel() else 0.0,
            "rel_rms": float(diff.pow(2).sum().sqrt()) / ref if ref else (0.0 if not diff.any() else math.inf),
            "differ": int((off != on).sum()), "numel": off.numel(), "dtype": str(off.dtype).replace("torch.", "")}


def describe(obs: dict | None) -> str:
    """One line: ``observer effect: none (...)`` or how far recording moved the outputs."""
    if not obs:
        return "observer effect: not measured"
    if obs["identical"]:
        return f"observer effect: none (outputs with and without probes bit-identical, {obs['numel']} values)"
    return (f"observer effect: recording moved the compiled outputs: {obs['differ']} of {obs['numel']} values "
            f"differ, max_abs {obs['max_abs']:.3g}, rel_rms {obs['rel_rms']:.3g} ({obs['dtype']}); narrow the "
            "probe set (include/exclude) until this reads none")

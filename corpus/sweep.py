"""Sensitivity: the smallest uniform scale on one mid-layer MLP that compare names top-1.

For each family with a sweep target, a case per factor (1.001 .. 1.10) is added to the family's
mods and judged like any planted fault, in fp32 and in bf16 with a control.
"""
from __future__ import annotations

from inkling_corpus import plant
from inkling_corpus.hf import Mod
from inkling_corpus.regimes import fault_case

FACTORS = (1.001, 1.002, 1.005, 1.01, 1.02, 1.03, 1.05, 1.10)
QUICK_FACTORS = (1.01, 1.03)
TARGETS = {  # family -> (module path, parameter, truth key)
    "llama": ("model.layers.2.mlp.down_proj", "weight", "model.layers.2.mlp.down_proj"),
    "qwen2_moe": ("model.layers.2.mlp.experts", "down_proj", "model.layers.2.mlp.experts"),
}


def cases(families: dict, quick: bool = False) -> list:
    """The sweep's cases, their mods registered with the families that have a target."""
    out = []
    for name, (path, param, truth) in TARGETS.items():
        if name not in families:
            continue
        family = families[name].FAMILY
        for f in QUICK_FACTORS if quick else FACTORS:
            mod = Mod(f"sweep_x{f}", plant.scale(path, f, param), (truth,), ("ratio",),
                      note=f"uniform x{f} on {path}.{param}")
            family.mods[mod.name] = mod
            out.append(fault_case(family, mod))
    return out


def smallest(results) -> list[str]:
    """One line per family and regime: the factors found top-1, and the smallest from which every
    larger factor is found too."""
    lines = []
    keys = sorted({(r.family, r.regime) for r in results})
    for family, regime in keys:
        rs = sorted((r for r in results if (r.family, r.regime) == (family, regime)),
                    key=lambda r: float(r.case.rsplit("_x", 1)[1]))
        marks = " ".join(f"{r.case.rsplit('_x', 1)[1]}:{'Y' if r.ok else 'n'}" for r in rs)
        best = None
        for r in reversed(rs):
            if not r.ok:
                break
            best = r.case.rsplit("_x", 1)[1]
        lines.append(f"sweep {family:10s} {regime:9s} smallest found (and all above): "
                     f"{('x' + best) if best else 'none'}   [{marks}]")
    return lines

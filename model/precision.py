"""Per-layer reference precision for NVFP4 checkpoints: ``INKLING_BF16_LAYERS``.

``INKLING_BF16_LAYERS=3,5`` (or ``3-5``, ``all``; empty or unset: none) keeps the routed experts of
those layers out of NVFP4 emulation: they multiply by the checkpoint's dequantized weights with
unquantized activations, as transformers' reference does with an NVFP4 checkpoint (the bf16 weights
themselves are not in an NVFP4 checkpoint). Layers whose experts are not NVFP4 ignore it.
``inkling-probe bisect precision`` sets it to find the layers that must stay at reference precision.
Read when the experts are built, so a spawned rank inherits it.
"""

from __future__ import annotations

import os

ENV = "INKLING_BF16_LAYERS"


def parse_layers(text: str) -> frozenset[int] | None:
    """``"3,5"``, ``"2-4,7"`` -> the layer ids; ``"all"`` -> None (every layer); ``""`` -> empty."""
    text = text.strip()
    if text == "all":
        return None
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        a, sep, b = part.partition("-")
        try:
            lo, hi = int(a), int(b) if sep else int(a)
        except ValueError:
            raise ValueError(f"{ENV}={text!r}: {part!r} is not a layer id or range A-B") from None
        out.update(range(lo, hi + 1))
    return frozenset(out)


def keeps_reference(layer_idx: int, environ=None) -> bool:
    """True when layer ``layer_idx``'s routed experts run unquantized (see the module doc)."""
    layers = parse_layers((environ if environ is not None else os.environ).get(ENV, ""))
    return layers is None or layer_idx in layers

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
    """``"3,5"``, ``"2-4,7"`` -> the layer ids; ``"all"`` -> None (every layer); ``""`` -> empty.

    A bad spec raises ValueError naming the variable."""
    from inkling_probe.bisect.precision import parse_layers as parse

    text = text.strip()
    return None if text == "all" else frozenset(parse(text, what=ENV, allow_empty=True))


def keeps_reference(layer_idx: int, environ=None) -> bool:
    """True when layer ``layer_idx``'s routed experts run unquantized (see the module doc)."""
    layers = parse_layers((environ if environ is not None else os.environ).get(ENV, ""))
    return layers is None or layer_idx in layers

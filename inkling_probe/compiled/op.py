"""``inkling_probe::emit(Tensor x, int key) -> ()``: the registered op a probe becomes under torch.compile.

The op returns nothing and is registered with an ORDERED effect (torch.library's effect API, the one
``aten::_print`` uses): AOTAutograd threads an effect token through it, so no pass removes it as dead
code or moves it past another probe, and Inductor keeps it as a fallback call in the generated code,
reading the buffer that holds ``x`` at that point of the compiled program. Its real kernel is
:func:`keys.deliver` (the eager recorder's path); its fake kernel does nothing. Outside a compile
nothing calls it: an eager probe goes to the recorder directly.
"""
from __future__ import annotations

import torch
from torch._higher_order_ops.effects import EffectType

from inkling_probe.compiled import keys


@torch.library.custom_op("inkling_probe::emit", mutates_args=())
def emit(x: torch.Tensor, key: int) -> None:
    """Record ``x`` under probe id ``key`` (keys.py) through the active recorder."""
    keys.deliver(key, x)


@emit.register_fake
def _emit_fake(x: torch.Tensor, key: int) -> None:
    return None


emit.register_effect(EffectType.ORDERED)


def traced_probe(name, tensor, shard, dim, token_dim, meta: dict) -> None:
    """A probe call while dynamo traces: one ``emit`` node with the call site's id, or none when the
    recording's globs leave the name out (sink.probe calls this)."""
    kid = keys.key_id(name, shard, dim, token_dim, tuple(meta.items()), keys.selection())
    if kid >= 0:
        torch.ops.inkling_probe.emit(tensor, kid)

"""``inkling_probe::emit(Tensor x, int key) -> ()``: the registered op a probe becomes under torch.compile.

The op returns nothing and is registered with an ORDERED effect (torch.library's effect API, the one
``aten::_print`` uses): AOTAutograd threads an effect token through it, so no pass removes it as dead
code or moves it past another probe, and Inductor keeps it as a fallback call in the generated code,
reading the buffer that holds ``x`` at that point of the compiled program. Its real kernel is
:func:`keys.deliver` (the eager recorder's path); its fake kernel does nothing. Outside a compile
nothing calls it: an eager probe goes to the recorder directly. ``inkling_probe::step`` does the same
for ``inkling_probe.step(**layout)`` called inside a compiled forward (inkling_model's prefill).
"""
from __future__ import annotations

import torch
from torch._higher_order_ops.effects import EffectType

from inkling_probe import sink
from inkling_probe.tracing import keys, replays


def _ordered(op):
    """Give ``op`` a fake kernel that does nothing and an ORDERED effect (the module docstring)."""
    op.register_fake(lambda *args: None)
    op.register_effect(EffectType.ORDERED)
    return op


@_ordered
@torch.library.custom_op("inkling_probe::emit", mutates_args=())
def emit(x: torch.Tensor, key: int) -> None:
    """Record ``x`` under probe id ``key`` (keys.py) through the active recorder (captured into a CUDA
    graph's static slot instead while one is being captured: replays.py)."""
    if not replays.claim_emit(key, x):
        keys.deliver(key, x)


@_ordered
@torch.library.custom_op("inkling_probe::step", mutates_args=())
def step(key: int) -> None:
    """``inkling_probe.step(**layout)`` with the layout of id ``key`` (keys.py), inside a compiled graph."""
    replays.step(("step", key))


@_ordered
@torch.library.custom_op("inkling_probe::forward_step", mutates_args=())
def forward_step(handle: int) -> None:
    """``record(model, steps="auto")``'s root pre-hook inside a compiled forward: its decision (step
    unless the caller stepped since the last forward) made when the node runs (hooks.py)."""
    replays.step(("forward", handle))


def traced_step(layout: dict) -> None:
    """A ``step()`` call while dynamo traces: one ``step`` node, ordered with the probes around it."""
    torch.ops.inkling_probe.step(keys.layout_id(tuple(layout.items())))


def _never_compile_the_recorder() -> None:
    """The recorder runs eagerly, never inside a graph: where a compiled program falls back to eager
    (a graph break), dynamo would otherwise try to compile the recorder's own frames as they are called
    from there, and count their breaks (getpid, the writer's mmap) as the model's."""
    from inkling_probe.recorder.recorder import Recorder

    for name in ("record", "next_step"):
        method = getattr(Recorder, name)
        if not getattr(method, "_torchdynamo_disable", False):
            setattr(Recorder, name, torch.compiler.disable(method))


_never_compile_the_recorder()


def traced_probe(name, tensor, shard, dim, token_dim, meta: dict) -> None:
    """A probe call while dynamo traces: one ``emit`` node with the call site's id, or none when the
    recording's globs leave the name out (sink.probe calls this)."""
    kid = keys.key_id(name, shard, dim, token_dim, tuple(meta.items()), keys.selection())
    if kid >= 0:
        torch.ops.inkling_probe.emit(tensor, kid)


sink.bind_tracing(torch.compiler.is_compiling, traced_probe, traced_step)  # the sink never imports this

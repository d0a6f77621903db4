"""Make module hooks visible to code dynamo compiled before they were added.

dynamo skips guards on ``nn.Module`` hooks by default (``torch._dynamo.config.skip_nnmodule_hook_guards``):
a model compiled before :func:`inkling_probe.record` added its hooks would go on running the graph
traced without them, and record only what runs outside it (measured: a compiled tiny Llama recorded
2 of its keys). :func:`guard_hooks` turns those guards on for the process, and the first time drops
every frame dynamo compiled so far, so each compiles again, now with the hooks and guarding on
them: adding or removing hooks is then one compile each way, never a stale graph.
"""
from __future__ import annotations

import sys


def guard_hooks() -> int:
    """Guard compiled frames on module hooks from now on; returns how many compiled frames were dropped
    (0 when dynamo is not loaded or the guards were on already)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    import torch._dynamo.config as config
    from torch._dynamo import convert_frame
    from torch._dynamo.eval_frame import reset_code

    if not config.skip_nnmodule_hook_guards:
        return 0
    config.skip_nnmodule_hook_guards = False
    dropped = 0
    for ref in list(convert_frame.input_codes.seen):
        code = ref()
        if code is not None:
            reset_code(code)
            dropped += 1
    return dropped

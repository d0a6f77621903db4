"""Record a compiled program once, with the facts a reader needs: how it compiled, and the observer effect.

:func:`record_compiled` runs the caller's compiled program probes off, then recorded (the graph with
emit nodes compiles on the recorded run, once), reads dynamo's counters around each, compares the two
outputs (observer.py) and writes ``compile.json`` into the dump (facts.py). Under a mode with CUDA
graphs (``reduce-overhead``, ``max-autotune``) each side first runs the warm-up and the capture
(:data:`WARM_CALLS`; recorded side: planned and captured, nothing recorded), and the call compared and
recorded is a replay, drained into the dump (tracing/replays.py).
"""
from __future__ import annotations

import contextlib

from inkling_probe.compiled import facts as _facts
from inkling_probe.tracing import op as _op  # noqa: F401  (binds the probe ops into the sink)
from inkling_probe.compiled.observer import effect
from inkling_probe.compiled.watch import watch
from inkling_probe.tracing import replays

GRAPH_MODES = ("reduce-overhead", "max-autotune")  # Inductor modes that run CUDA graphs
WARM_CALLS = 2  # CUDA graph trees: a graph's first call warms up, its second captures (and replays once)


def record_compiled(run, path, *, backend: str, mode: str | None = None, module=None, **settings) -> dict:
    """Record ``run()`` (a compiled forward returning its output tensor, e.g. logits) into ``path``.

    ``module``: record its submodules by hooks (:func:`inkling_probe.record`, ``settings`` such as
    ``name_map``, ``include``); else the probes the model calls (:func:`inkling_probe.recording`).
    ``backend``/``mode`` are what the caller compiled with (stored; a CUDA-graph mode records a replay,
    module docstring). Returns the facts written.
    """
    import torch

    import inkling_probe

    warm = WARM_CALLS if mode in GRAPH_MODES else 0
    bracket = replays.ReplayRecording(plan_only=True)
    with torch.no_grad():
        with watch() as off_counts:
            for _ in range(warm):
                run()
            off = _output(run()).clone()  # a replay's output is overwritten by the next replay
        rec = (inkling_probe.record(module, path, **settings) if module is not None
               else inkling_probe.recording(path, **settings))
        with rec, watch() as on_counts:
            for _ in range(warm):
                with replays.calls(bracket):
                    run()
            bracket.plan_only = False
            with replays.calls(bracket):
                on = _output(run()).clone()
    facts = {"backend": backend, "mode": mode, "off": off_counts.to_dict(), "on": on_counts.to_dict(),
             "observer": effect(off, on)}
    if warm:
        facts["cudagraph"] = {"replayed": bracket.drained}
    with contextlib.suppress(FileNotFoundError):  # a recording that kept nothing has no folder
        _facts.write(path, facts)
    return facts


def _output(out):
    """The tensor to compare: the output itself, or its ``logits``."""
    return getattr(out, "logits", out)

"""Record a compiled program once, with the facts a reader needs: how it compiled, and the observer effect.

:func:`record_compiled` runs the caller's compiled program twice, probes off then recorded (the
graph with emit nodes compiles on the recorded run, once), reads dynamo's counters around each,
compares the two outputs (observer.py) and writes ``compile.json`` into the dump (facts.py).
"""
from __future__ import annotations

import contextlib

from inkling_probe.compiled import facts as _facts
from inkling_probe.tracing import op as _op  # noqa: F401  (binds the probe ops into the sink)
from inkling_probe.compiled.observer import effect
from inkling_probe.compiled.watch import watch


def record_compiled(run, path, *, backend: str, mode: str | None = None, module=None, **settings) -> dict:
    """Record ``run()`` (a compiled forward returning its output tensor, e.g. logits) into ``path``.

    ``module``: record its submodules by hooks (:func:`inkling_probe.record`, ``settings`` such as
    ``name_map``, ``include``); else the probes the model calls (:func:`inkling_probe.recording`).
    ``backend``/``mode`` are what the caller compiled with (stored). Returns the facts written.
    """
    import torch

    import inkling_probe

    with torch.no_grad():
        with watch() as off_counts:
            off = _output(run())
        rec = (inkling_probe.record(module, path, **settings) if module is not None
               else inkling_probe.recording(path, **settings))
        with rec, watch() as on_counts:
            on = _output(run())
    facts = {"backend": backend, "mode": mode, "off": off_counts.to_dict(), "on": on_counts.to_dict(),
             "observer": effect(off, on)}
    with contextlib.suppress(FileNotFoundError):  # a recording that kept nothing has no folder
        _facts.write(path, facts)
    return facts


def _output(out):
    """The tensor to compare: the output itself, or its ``logits``."""
    return getattr(out, "logits", out)

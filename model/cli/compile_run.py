"""``run --compile``: inkling_model's prefill under torch.compile, recorded inside the compiled graph.

On the CPU with modes ``default``/``max-autotune-no-cudagraphs``; ``reduce-overhead``/``max-autotune``
(CUDA graphs) run on the GPU and record a replay, drained from the graph (inkling_probe/tracing/replays.py).

:func:`check` refuses (one line, exit 2) what this path does not run; :func:`record_prefill` compiles the
model (``model.compile``) and records the prefill through
:func:`inkling_probe.compiled.session.record_compiled` (probes off, then recorded; ``compile.json`` in
the dump: graph breaks, observer effect), the dump ``inkling-probe compilediff`` judges against an eager
``run`` of the same checkpoint and tokens.
"""
from __future__ import annotations

from inkling_probe.cli.common import BadInput

BACKENDS = ("inductor", "aot_eager_decomp_partition_crossref", "aot_eager_decomp_partition", "aot_eager", "eager")
MODES = ("default", "max-autotune-no-cudagraphs")  # on the CPU
GRAPH_MODES = ("reduce-overhead", "max-autotune")  # CUDA graphs: the run goes to the GPU, a replay is recorded


def check(backend: str, mode: str | None, *, impl: str, tp: int, dp: int, max_new: int, dump, runtime: bool,
          media: bool, forced: bool) -> dict:
    """The compile settings (``{"backend", "mode"}``) or :class:`BadInput` naming what does not fit."""
    if backend not in BACKENDS:
        raise BadInput(f"--compile-backend {backend}: expected one of {', '.join(BACKENDS)}")
    if mode is not None:
        if mode not in MODES + GRAPH_MODES:
            raise BadInput(f"--compile-mode {mode}: expected one of {', '.join(MODES + GRAPH_MODES)}")
        if mode in GRAPH_MODES and not _cuda():
            raise BadInput(f"--compile-mode {mode}: CUDA graphs need a CUDA device, and torch.cuda.is_available() "
                           "is False here")
        if backend != "inductor":
            raise BadInput(f"--compile-mode {mode}: a mode is Inductor's; --compile-backend is {backend}")
    if impl != "native" or tp != 1 or dp != 1:
        raise BadInput("--compile runs inkling_model in one process (--impl native, --tp 1, --dp 1)")
    if max_new:
        raise BadInput(f"--compile records the prefill: --max-new-tokens {max_new} must be 0")
    if runtime or media or forced:
        raise BadInput("--compile: the text prefill (not --cuda-graph/--enforce-eager, --image/--audio, --force-*)")
    if dump is None:
        raise BadInput("--compile records: pass --dump DIR")
    return {"backend": backend, "mode": mode}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def record_prefill(model, prompts, request_ids, dump: str, backend: str, mode: str | None) -> dict:
    """Compile ``model`` and record its prefill of ``prompts`` into ``dump``; returns record_compiled's facts."""
    from inkling_model.generate import prefill
    from inkling_probe.compiled.session import record_compiled

    model.compile(backend=backend, mode=mode)
    return record_compiled(lambda: prefill(model, prompts, request_ids), dump, backend=backend, mode=mode)


def describe(facts: dict) -> str:
    """Two lines for the run's report: how it compiled, and the observer effect."""
    from inkling_probe.compiled.observer import describe as observer
    from inkling_probe.compiled.watch import Compiled

    from inkling_probe.compiled.facts import cuda_graph_line

    on = Compiled(**facts["on"])
    graphs = cuda_graph_line(facts)
    return (f"compiled: backend={facts['backend']} mode={facts['mode']}; recorded run: {on.summary()}\n"
            + (f"{graphs}\n" if graphs else "") + observer(facts["observer"]))

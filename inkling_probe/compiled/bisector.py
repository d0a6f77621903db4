"""Bisect into the compiler with PyTorch's own CompilerBisector and the toolkit's oracle.

:func:`bisect_compiler` drives ``torch._inductor.compiler_bisector.CompilerBisector.do_bisect``: each
trial records the compiled program afresh under the backend (and disabled subsystem) the bisector
asks for, and the oracle is compilediff against the eager dump (good: within what the dtype allows
at every probe point). The answer names the stage (eager, aot_eager, aot_eager_decomp_partition,
inductor), the subsystem or pass and the count where the bisector found one. One line per trial.
In-process and not resumable (do_bisect clears its state files when it starts).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable


def bisect_compiler(record: Callable[[str, Path], None], eager, workdir, log=print) -> dict:
    """``record(backend, dump)`` records the compiled run (``torch.compile(backend=backend)``, fresh) into
    ``dump``; returns ``{"backend", "subsystem", "count", "trials"}`` (backend None: no stage diverges)."""
    import torch
    from torch._inductor.compiler_bisector import CompilerBisector

    from inkling_probe.compiled.diff import compiled_vs_eager

    trials: list[dict] = []

    def oracle() -> bool:
        backend, subsystem = CompilerBisector.get_backend(), CompilerBisector.get_subsystem()
        dump = Path(workdir) / f"trial-{len(trials)}"
        torch._dynamo.reset()
        record(backend, dump)
        verdict = compiled_vs_eager(eager, dump)
        where = f"first divergent point {verdict.first['key']} (rel_rms {verdict.first['error']:.3g})" \
            if verdict.diverged else f"within ({verdict.judged} tensors)"
        trials.append({"backend": backend, "subsystem": subsystem, "good": not verdict.diverged})
        log(f"trial {len(trials)}: backend={backend} subsystem={subsystem or '-'}: "
            f"{'good' if not verdict.diverged else 'bad'}, {where}")
        return not verdict.diverged

    result = CompilerBisector.do_bisect(oracle)
    if result is None:
        return {"backend": None, "subsystem": None, "count": None, "trials": len(trials)}
    return {"backend": result.backend, "subsystem": result.subsystem, "count": result.bisect_number,
            "trials": len(trials)}

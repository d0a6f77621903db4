"""Bisect into the compiler with PyTorch's own CompilerBisector and the toolkit's oracle.

:func:`bisect_compiler` drives ``torch._inductor.compiler_bisector.CompilerBisector.do_bisect``: each
trial records the compiled program afresh under the backend (and disabled subsystem) the bisector
asks for, and the oracle is compilediff against the eager dump (good: within what the dtype allows
at every probe point). The answer names the stage (eager, aot_eager, aot_eager_decomp_partition,
inductor), the subsystem or pass and the count where the bisector found one. One line per trial.

Resumable: the bisector's own state files live in ``WORKDIR/torch-cache/bisect`` and are stepped one
trial at a time (do_bisect's ``cli_interface`` mode), and ``WORKDIR/trials.jsonl`` keeps the trial
lines; run again with the same WORKDIR and the bisect goes on from the last finished trial (a
finished one prints its trials and ``answer.json``).

A stage that cannot run with probes is not a verdict: the bisector's
``aot_eager_decomp_partition_crossref`` runs the graph under ``CrossRefFakeMode``, which has no rule
for the ``with_effects`` wrapper around the ordered ``inkling_probe::emit`` op. That trial is counted
good (not the culprit) with a line saying so, and the bisect goes on into Inductor. Where that stage
fails on its own check instead (a custom op's fake kernel disagrees with its real one, before any
probe reaches the with_effects rule), the trial is bad: that is the stage's verdict.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

from inkling_probe.errors import ProbeError

STATE = "torch-cache"  # TORCHINDUCTOR_CACHE_DIR of a subprocess trial; the bisector's files in STATE/bisect
TRIALS = "trials.jsonl"
ANSWER = "answer.json"  # a finished bisect: a run again prints its trials and this
UNRUNNABLE = {  # stage -> (text the failure names, why the stage cannot run with probes)
    "aot_eager_decomp_partition_crossref": (
        "with_effects", "CrossRefFakeMode has no rule for the with_effects wrapper of the ordered "
                        "inkling_probe::emit op (the fake-vs-real check of custom ops is not made)"),
}


FINDINGS = {  # stage -> (text its failure names, what it found): a crash that is the stage's own verdict
    "aot_eager_decomp_partition_crossref": (
        "on FakeTensor and concrete Tensors", "a fake kernel disagrees with its real kernel"),
}


class TrialFailed(ProbeError):
    """A trial's record did not finish (a crash), at a stage where that is no verdict of ours."""


def state_dir(workdir) -> Path:
    """The cache dir whose ``bisect/`` holds the bisector's state for ``workdir``."""
    return Path(workdir) / STATE


def trial_env(workdir) -> dict:
    """Environment for a trial run in a subprocess: the backend, subsystem and disable bound the
    bisector asks for (as its own ``run`` mode sets them), its state dir, and Inductor's caches off
    (a cached graph would skip the disabled subsystem)."""
    from torch._inductor.compiler_bisector import CompilerBisector as B

    env = {"TORCHINDUCTOR_CACHE_DIR": str(state_dir(workdir)), "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    backend, subsystem = B.get_backend(), B.get_subsystem()
    if backend:
        env["TORCH_BISECT_BACKEND"] = backend
    if subsystem:
        env["TORCH_BISECT_SUBSYSTEM"] = subsystem
        if B.get_run_state(backend, subsystem) == "test_disable":
            env["TORCH_BISECT_MAX"] = "-1"
    return env


def _trials(workdir) -> list[dict]:
    path = Path(workdir) / TRIALS
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def bisect_compiler(record: Callable[[str, Path], None], eager, workdir, log=print) -> dict:
    """``record(backend, dump)`` records the compiled run (``torch.compile(backend=backend)``, fresh) into
    ``dump`` (raising on a crash; a subprocess record passes :func:`trial_env`); returns ``{"backend",
    "subsystem", "count", "trials", "skipped"}`` (backend None: no stage diverges)."""
    import torch
    from torch._inductor.compiler_bisector import CompilerBisector as B

    from inkling_probe.compiled.diff import compiled_vs_eager

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    trials = _trials(workdir)
    for t in trials:
        log(t["line"])
    if (workdir / ANSWER).exists():
        return json.loads((workdir / ANSWER).read_text())
    shown = sys.stdout

    def oracle() -> bool:
        backend, subsystem = B.get_backend(), B.get_subsystem()
        n = len(trials) + 1
        head = f"trial {n}: backend={backend} subsystem={subsystem or '-'}"
        dump = workdir / f"trial-{n}"
        torch._dynamo.reset()
        try:
            record(backend, dump)
        except Exception as e:  # noqa: BLE001 (a stage's crash: skipped where known, else no verdict)
            text, why = UNRUNNABLE.get(backend, (None, None))
            found, what = FINDINGS.get(backend, (None, None))
            last = (str(e).strip().splitlines() or [repr(e)])[-1]
            if found is not None and found in str(e):
                good, skipped, line = False, False, f"{head}: bad, {what}: {last}"
            elif text is None or text not in str(e):
                raise TrialFailed(f"{head}: the record failed: {last}") from None
            else:
                good, skipped, line = True, True, f"{head}: skipped, counted good (not the culprit): {why}"
        else:
            verdict = compiled_vs_eager(eager, dump)
            good, skipped = not verdict.diverged, False
            where = (f"first divergent point {verdict.first['key']} (rel_rms {verdict.first['error']:.3g})"
                     if verdict.diverged else f"within ({verdict.judged} tensors)")
            line = f"{head}: {'good' if good else 'bad'}, {where}"
        trials.append({"backend": backend, "subsystem": subsystem, "good": good, "line": line, "skipped": skipped})
        with open(workdir / TRIALS, "a") as f:
            f.write(json.dumps(trials[-1]) + "\n")
        with _stdout(shown):
            log(line)
        return good

    saved = B.bisection_enabled, B.in_process_cache
    B.bisection_enabled, B.in_process_cache = True, str(state_dir(workdir))
    try:
        with open(os.devnull, "w") as quiet, _stdout(quiet):
            if not B.get_backend():
                B.initialize_system()
            while True:  # one trial per step; the state files carry the bisect between steps (and runs)
                try:
                    result = B.do_bisect(oracle, cli_interface=True)
                    break
                except SystemExit:
                    continue
    finally:
        B.bisection_enabled, B.in_process_cache = saved
    skipped = [t["backend"] for t in trials if t.get("skipped")]
    answer = {"backend": None, "subsystem": None, "count": None} if result is None else \
        {"backend": result.backend, "subsystem": result.subsystem, "count": result.bisect_number}
    answer.update(trials=len(trials), skipped=skipped)
    (workdir / ANSWER).write_text(json.dumps(answer) + "\n")
    return answer


def _stdout(stream):
    """The bisector's own prints (``Moving to the next system``...) go to ``stream``: ours are the lines."""
    import contextlib

    return contextlib.redirect_stdout(stream)

"""inkling_model's environment variables that change what it computes, for the bug-report repro.

Registered in the ``inkling_probe.computation_env`` entry-point group (pyproject.toml): a report's
``repro.sh`` and ``test_repro.py`` carry each of them with the value the candidate ran with (unset
ones unset), so the repro computes what the candidate computed in a clean shell. No torch here: the
report imports it. tests/model/test_computation_env.py checks the names against the modules that
read them.
"""
from __future__ import annotations

from inkling_model.switches import faults, forced_routing, forced_tokens, precision


def variables() -> dict[str, str]:
    """``{name: why}``: every variable by name, so that a repro can unset those the candidate lacked."""
    return {
        faults.ENV: "planted faults (model/switches/faults.py): the bugs themselves",
        **{faults.switch_var(f.name): f"planted fault {f.name} alone ({f.carrier})" for f in faults.FAULTS.values()},
        "INKLING_ALLREDUCE": "all-reduce strategy (nccl | oneshot | auto, per-module rules): model/allreduce.py",
        precision.ENV: "routed-expert layers kept at reference precision on NVFP4 checkpoints: model/switches/precision.py",
        forced_routing.ENV: "routers take a reference dump's top-k ids (run --force-routing): model/switches/forced_routing.py",
        forced_tokens.ENV: "decode steps are fed a reference dump's tokens (run --force-tokens): model/switches/forced_tokens.py",
        "INKLING_CUDA_GRAPH": "decode through the runtime with captured CUDA graphs: model/runtime/runtime.py",
        "INKLING_ENFORCE_EAGER": "decode through the runtime eagerly (no capture): model/runtime/runtime.py",
    }

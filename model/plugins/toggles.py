"""inkling_model's switches for ``inkling-probe bisect flags --model inkling_model``.

Registered in the ``inkling_probe.toggles`` entry-point group (pyproject.toml). Each toggle is an
environment variable with a GOOD value (the safe, reference setting) and a BAD value (the one
suspected); ``None`` means the variable is unset. ``needs`` says what must exist for the toggle to
act: the CUDA-graph switch needs a GPU and ``INKLING_CUDA_GRAPH=1`` in the environment.
"""

from __future__ import annotations

from inkling_model.switches import faults, precision


def _fault_toggles() -> list[dict]:
    return [dict(name=f"fault_{f.name}", env=faults.switch_var(f.name), good=None, bad="1",
                 doc=f"planted fault {f.name} ({f.carrier})", needs=None)
            for f in faults.FAULTS.values()]


def toggles() -> list[dict]:
    """The model's toggles: ``{"name", "env", "good", "bad", "doc", "needs"}`` each."""
    return [
        dict(name="cuda_graph", env="INKLING_ENFORCE_EAGER", good="1", bad="0",
             doc="with INKLING_CUDA_GRAPH=1 (the decode runtime on the GPU): decode steps replayed from "
                 "captured CUDA graphs (bad) or the same runtime run eagerly (good)", needs="CUDA"),
        dict(name="allreduce", env="INKLING_ALLREDUCE", good="nccl", bad="oneshot",
             doc="all-reduce strategy (nccl | oneshot | auto; auto picks oneshot where its warm-up timing "
                 "finds it faster, so oneshot is the deterministic way to test that path)", needs=None),
        dict(name="nvfp4_experts", env=precision.ENV, good="all", bad=None,
             doc="NVFP4 emulation of the routed experts (good: every layer unquantized)", needs=None),
        *_fault_toggles(),
    ]

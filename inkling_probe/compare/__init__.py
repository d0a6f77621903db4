"""Compare two dumps: where, and why, the candidate leaves the reference (docs/COMPARE.md).

- :func:`compare` aligns two dumps (name maps, steps, calls, tokens; TP shards reassembled),
  measures every pair in float64, sets a threshold per key (a control's noise floor or dtype
  defaults), finds the first divergence and the culprit (where the error is born) and explains it.
- :func:`compare_tensors` gives the metrics of one pair, :func:`explain` the hypotheses that hold.
- :func:`replay` runs a candidate module on a reference dump's recorded inputs.
"""
from inkling_probe.compare.engine import compare
from inkling_probe.compare.explain import Context, Finding, explain
from inkling_probe.compare.metrics import Metrics, compare_tensors

__all__ = ["compare", "compare_tensors", "explain", "Metrics", "Context", "Finding", "replay"]


def __getattr__(name):  # replay needs torch: loaded on first use only
    if name == "replay":
        from inkling_probe.compare.replay import replay
        globals()["replay"] = replay  # the import set the submodule here: the function wins
        return replay
    raise AttributeError(f"module 'inkling_probe.compare' has no attribute {name!r}")


import sys  # noqa: E402

from inkling_probe.views.notebook import callable_compare  # noqa: E402

callable_compare(sys.modules[__name__])  # inkling_probe.compare(ref, cand, ...) works however imported

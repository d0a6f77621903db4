"""Recording compiled models (torch.compile): probes that trace, the observer effect, compiled vs eager.

The probes that trace are inkling_probe/tracing (the registered ops, ids fixed at trace time; under
CUDA graphs, replays.py: :func:`replayed` brackets a compiled callable's calls); here:
session.py records a compiled program with the observer effect stated; watch.py reads dynamo's own counters (graph
breaks, recompiles); observer.py measures whether recording moved the compiled model's outputs;
diff.py is compilediff; bisector.py drives PyTorch's CompilerBisector with the toolkit's oracle.
docs/COMPILE.md is the user's guide.
"""


def __getattr__(name):  # ``replayed`` imports torch: only when asked for (ls and compilediff read facts.py torch-free)
    if name == "replayed":
        from inkling_probe.tracing import op  # noqa: F401  (the probe ops, bound into the sink)
        from inkling_probe.tracing.replays import replayed

        return replayed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

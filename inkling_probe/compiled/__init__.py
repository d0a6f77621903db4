"""Recording compiled models (torch.compile): probes that trace, the observer effect, compiled vs eager.

The probes that trace are inkling_probe/tracing (the registered ops, ids fixed at trace time); here:
session.py records a compiled program with the observer effect stated; watch.py reads dynamo's own counters (graph
breaks, recompiles); observer.py measures whether recording moved the compiled model's outputs;
diff.py is compilediff; bisector.py drives PyTorch's CompilerBisector with the toolkit's oracle.
docs/COMPILE.md is the user's guide.
"""

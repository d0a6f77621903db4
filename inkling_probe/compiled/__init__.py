"""Recording compiled models (torch.compile): probes that trace, the observer effect, compiled vs eager.

op.py registers ``inkling_probe::emit``, the op a probe becomes under dynamo; keys.py turns probe
names into ids at trace time and back at run time; watch.py reads dynamo's own counters (graph
breaks, recompiles); observer.py measures whether recording moved the compiled model's outputs;
diff.py is compilediff; bisector.py drives PyTorch's CompilerBisector with the toolkit's oracle.
docs/COMPILE.md is the user's guide.
"""

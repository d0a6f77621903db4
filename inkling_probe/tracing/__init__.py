"""Probes inside a torch.compile'd graph: the registered ops a probe, a ``step()`` and ``record()``'s
step-each-forward hook become under dynamo (op.py), probe names as ids fixed at trace time (keys.py),
module hooks guarded so a model compiled before ``record()`` sees them (freshen.py), and the
step-each-forward hooks the op runs (steppers.py).

Importing op.py binds the traced path into the sink (``sink.bind_tracing``); ``record()``,
``compiled.session.record_compiled`` and ``run --compile`` import it. The sink itself never imports
this package (it stays torch-free): a model whose own ``inkling_probe.probe`` calls are compiled before
anything imported it records each probe eagerly, as a graph break, which compilediff refuses.
"""

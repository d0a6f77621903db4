"""The write side behind an enabled :func:`inkling_probe.probe`: the recorder (:mod:`.recorder`:
filters, slices, copies, hands to the store's writer) and its staging (:mod:`.staging`:
asynchronous device-to-host copies for eager probes of device tensors).

(The package was ``inkling_probe/record/`` before 0.2.0; ``inkling_probe.record`` is the function
that records a module with hooks, :func:`inkling_probe.hooks.record`.)
"""

"""The write side behind an enabled :func:`inkling_probe.probe`: the recorder (:mod:`.recorder`:
filters, slices, copies, hands to the store's writer) and its staging (:mod:`.staging`:
asynchronous device-to-host copies for eager probes of device tensors).

``inkling_probe.record(module, path, ...)`` calls :func:`inkling_probe.hooks.record` (module hooks,
above the sink): this package is made callable by ``inkling_probe/__init__.py``.
"""

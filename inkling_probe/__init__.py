"""inkling-probe: record, compare and localize numerical divergence in LLM inference engines.

Model code calls :func:`probe` at each probe point; with ``INKLING_PROBE`` unset the call returns at
once. :func:`record` captures any ``torch.nn.Module`` with forward hooks, :func:`open` reads a dump,
:func:`compare_dumps` compares two (a report with an HTML view, ``.plot()``; also
``inkling_probe.compare.compare``).
docs/PROBES.md lists the settings and docs/FORMAT.md the file format.
"""
from inkling_probe.sink import enabled, probe, recording, step


def record(module, path=None, include=None, inputs=True, name_map=None, token_dim="auto", batch_row=None,
           steps="auto", **settings):
    """Record every matching submodule of ``module`` (any ``torch.nn.Module``) with forward hooks while
    the block runs: :func:`inkling_probe.hooks.record`, which documents each argument (torch is
    imported on the call, so ``import inkling_probe`` stays light)."""
    from inkling_probe.hooks import record as hooks_record

    return hooks_record(module, path, include, inputs, name_map, token_dim, batch_row, steps, **settings)


__all__ = ["probe", "step", "enabled", "recording", "record", "open", "compare_dumps", "compare", "NameMap"]


def __getattr__(name):  # heavy parts load on first use, so `import inkling_probe` stays light
    if name == "open":
        from inkling_probe.store.reader import open_dump
        return open_dump
    if name == "compare_dumps":  # compare(ref, cand, control=None, ...): compare/engine.py
        from inkling_probe.compare.engine import compare
        return compare
    if name == "compare":  # the package; calling it is deprecated (0.2.0, goes in 0.3.0): compare_dumps
        import inkling_probe.compare as package
        from inkling_probe.views.notebook import callable_compare
        return callable_compare(package)
    if name == "NameMap":
        from inkling_probe.store.namemap import NameMap
        return NameMap
    raise AttributeError(f"module 'inkling_probe' has no attribute {name!r}")

"""inkling-probe: record, compare and localize numerical divergence in LLM inference engines.

Model code calls :func:`probe` at each probe point; with ``INKLING_PROBE`` unset the call
returns at once. See docs/PROBES.md for the settings and docs/FORMAT.md for the dump format.
"""
from inkling_probe.sink import enabled, probe, step

__all__ = ["probe", "step", "enabled"]

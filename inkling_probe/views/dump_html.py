"""Moved to :mod:`inkling_probe.store.dump_html` (``Dump._repr_html_`` renders through it, and the
store imports nothing of ``views``). The old names here warn for one release."""
import warnings

from inkling_probe.store import dump_html as _moved


def __getattr__(name):
    value = getattr(_moved, name)  # AttributeError for a name that never was
    warnings.warn(f"inkling_probe.views.dump_html.{name} moved to inkling_probe.store.dump_html.{name}; "
                  "the old name goes in the next release", DeprecationWarning, stacklevel=2)
    return value

"""Moved to :mod:`inkling_probe.store.namemap` (the store's foreign readers take a ``NameMap``, and
it reads its file through the store: one room). The old names here warn for one release."""
import warnings

from inkling_probe.store import namemap as _moved


def __getattr__(name):
    value = getattr(_moved, name)  # AttributeError for a name that never was
    warnings.warn(f"inkling_probe.namemap.{name} moved to inkling_probe.store.namemap.{name}; "
                  "the old name goes in the next release", DeprecationWarning, stacklevel=2)
    return value

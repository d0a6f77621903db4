"""Opens a dump: our own store (a folder of per-rank segment files, :class:`~inkling_probe.store.dump.Dump`)
or a foreign one (store/foreign). ``Dump``, ``Segment``, ``MAX_OPEN_FILES`` and ``PACK_CACHE_BYTES``
moved to :mod:`inkling_probe.store.dump` (the foreign dump builds on ``Dump`` while this module opens
foreign dumps: one module for both was a circle); their old names here warn for one release."""
from __future__ import annotations

import warnings

from inkling_probe.store import dump as _dump

__all__ = ["Dump", "Segment", "open_dump", "as_dump", "MAX_OPEN_FILES"]

MOVED = ("Dump", "Segment", "MAX_OPEN_FILES", "PACK_CACHE_BYTES")  # to inkling_probe.store.dump


def open_dump(path, **foreign) -> "_dump.Dump":
    """Open the dump at ``path`` (a dump folder, or one segment file of it). Any other folder or file
    is read as a foreign dump (store/foreign: SGLang's dumper, .pt, .safetensors, .npz, .npy), with
    ``foreign`` options ``name_map=``, ``pattern=``, ``params=`` (docs/INTEROP.md)."""
    from inkling_probe.store.foreign import is_foreign, open_foreign

    if foreign or is_foreign(path):
        return open_foreign(path, **foreign)
    return _dump.Dump(path)


def as_dump(d) -> "_dump.Dump | None":
    """A Dump from a path, the Dump itself, or None for None (for APIs taking either)."""
    return d if d is None or isinstance(d, _dump.Dump) else open_dump(d)


def __getattr__(name):
    if name in MOVED:
        warnings.warn(f"inkling_probe.store.reader.{name} moved to inkling_probe.store.dump.{name}; "
                      "the old name goes in the next release", DeprecationWarning, stacklevel=2)
        return getattr(_dump, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

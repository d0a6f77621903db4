"""Opens a dump: our own store (a folder of per-rank segment files, :class:`~inkling_probe.store.dump.Dump`)
or a foreign one (store/foreign). ``Dump``, ``Segment``, ``MAX_OPEN_FILES`` and ``PACK_CACHE_BYTES``
live in :mod:`inkling_probe.store.dump` (their old names here were removed in 0.2.0: importing one
names the new one)."""
from __future__ import annotations

from inkling_probe.removed import module_getattr
from inkling_probe.store import dump as _dump

__all__ = ["open_dump", "as_dump"]


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


__getattr__ = module_getattr(__name__, {n: f"inkling_probe.store.dump.{n}"
                                        for n in ("Dump", "Segment", "MAX_OPEN_FILES", "PACK_CACHE_BYTES")})

"""Foreign dumps read as dumps: SGLang's dumper folders, folders of per-tensor ``.pt`` files, and
``.safetensors`` / ``.npz`` / ``.npy`` files or folders (docs/INTEROP.md).

:func:`open_foreign` is what ``inkling_probe.open`` falls back to when a path is not one of our
HDF5 dumps. How to read one (the name map with its layouts and splits, a file-name pattern,
model params) is given as arguments, or, so that every command reads it the same way, by an
``inkling_probe.toml`` file in the dump folder:

    map = "sglang_inkling"        # a shipped map's name or a TOML file inside the folder (else refused)
    pattern = '(?P<key>.+)\\.rank(?P<rank>\\d+)\\.pt'   # optional
    token_dim = 0                 # optional: where the map does not say (-1 none; default "auto")
    [params]                      # optional: overrides the map's [foreign.params]
    kv_heads = 16
"""
from __future__ import annotations

import os
import tomllib

from inkling_probe.errors import DumpError
from inkling_probe.store.foreign.names import SETTINGS_FILE

__all__ = ["open_foreign", "is_foreign", "SETTINGS_FILE"]

_MAX_SETTINGS_BYTES = 1 << 16


def open_foreign(path, name_map=None, pattern: str | None = None, params: dict | None = None, token_dim=None):
    """A :class:`ForeignDump` of ``path``; arguments override the folder's ``inkling_probe.toml``.

    ``name_map``: a NameMap, TOML path or shipped map name (its rules may declare layouts and splits);
    ``pattern``: a regex over file paths with groups key, step, rank, call; ``params``: sizes the
    map's splits use; ``token_dim``: every tensor's token dim (-1: none, "auto": as our hooks find it)
    where the map does not say."""
    from inkling_probe.store.namemap import NameMap
    from inkling_probe.store.foreign.dump import ForeignDump

    path = os.fspath(path)
    if not os.path.lexists(path):
        raise DumpError(f"{path}: no such file or directory")
    if _is_ours(path):
        raise DumpError(f"{path}: an inkling-probe dump; name_map=, pattern=, params= read foreign dumps "
                        "(compare's name map renames the keys of ours)")
    settings = read_settings(path)
    spec = name_map if name_map is not None else _settings_map(path, settings.get("map"))
    nm = NameMap.load(spec) if spec is not None else None
    merged = {**settings.get("params", {}), **(params or {})}
    td = token_dim if token_dim is not None else settings.get("token_dim")
    return ForeignDump(path, nm, pattern if pattern is not None else settings.get("pattern"), merged or None,
                       token_dim=td)


def _settings_map(path: str, spec: str | None) -> str | None:
    """The settings file's ``map``: a shipped map's name, or a file inside the dump folder (links
    resolved); anything else on the machine is refused, one line (a folder must not make a command
    read ``/etc/...`` or ``../../secret.toml``)."""
    from inkling_probe.store.namemap import shipped_maps

    if spec is None or spec in shipped_maps():
        return spec
    root = os.path.realpath(path)
    target = os.path.realpath(os.path.join(root, spec))
    if os.path.isabs(spec) or os.path.commonpath([root, target]) != root:
        raise DumpError(f"{os.path.join(path, SETTINGS_FILE)}: map {spec!r} is outside the dump folder (a shipped "
                        f"map's name, or a file in the folder: {', '.join(shipped_maps())})")
    if not os.path.isfile(target):
        raise DumpError(f"{os.path.join(path, SETTINGS_FILE)}: map {spec!r}: no such file in the dump folder and "
                        f"no shipped map of that name ({', '.join(shipped_maps())})")
    return target


def is_foreign(path) -> bool:
    """True for a path that is not one of our dumps: a folder holding no segment (or lock) files
    but other files, or a file that is not HDF5 (by content)."""
    from inkling_probe.store import schema
    from inkling_probe.store.foreign.sniff import sniff

    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.islink(path):
        names = os.listdir(path)
        ours = any(schema.parse_segment_name(n) or schema.LOCK_RE.match(n) for n in names)
        return bool(names) and not ours
    if os.path.isfile(path) and not os.path.islink(path):
        try:
            return sniff(path) not in ("hdf5", None)
        except OSError:
            return False
    return False


def _is_ours(path: str) -> bool:
    """A folder holding our segment (or lock) files, or one HDF5 segment file."""
    from inkling_probe.store import schema
    from inkling_probe.store.foreign.sniff import sniff

    if os.path.islink(path):
        return False
    if os.path.isdir(path):
        return any(schema.parse_segment_name(n) or schema.LOCK_RE.match(n) for n in os.listdir(path))
    return os.path.isfile(path) and sniff(path) == "hdf5"


def read_settings(path: str) -> dict:
    """The folder's ``inkling_probe.toml`` ({} when there is none)."""
    file = os.path.join(path, SETTINGS_FILE)
    if not os.path.isdir(path) or not os.path.isfile(file) or os.path.islink(file):
        return {}
    with open(file, "rb") as fh:
        data = fh.read(_MAX_SETTINGS_BYTES + 1)
    if len(data) > _MAX_SETTINGS_BYTES:
        raise DumpError(f"{file}: larger than {_MAX_SETTINGS_BYTES >> 10} KiB; not a settings file")
    try:
        doc = tomllib.loads(data.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as e:
        raise DumpError(f"{file}: not valid TOML ({e})") from None
    unknown = set(doc) - {"map", "pattern", "params", "token_dim"}
    if unknown:
        raise DumpError(f"{file}: unknown key {sorted(unknown)[0]!r} (known: map, pattern, params, token_dim)")
    for k in ("map", "pattern"):
        if k in doc and not isinstance(doc[k], str):
            raise DumpError(f"{file}: {k!r} must be a string")
    if not isinstance(doc.get("params", {}), dict):
        raise DumpError(f"{file}: 'params' must be a table")
    return doc

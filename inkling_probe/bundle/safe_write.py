"""Writing files the toolkit's way: only new files, inside the folder meant, never through a link.

Every file of a report (and of ``extract``) is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: an
existing file, or a symbolic link planted where a file will go (dangling or not), is refused
rather than followed or overwritten; its folder must resolve to the folder meant (no link in the
last step, no ``..``).
"""
from __future__ import annotations

import os

from inkling_probe.errors import ProbeError

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def check_target(path: str, what: str = "") -> str:
    """``path`` normalised; refused (one line) when it exists, or is a link (dangling or not)."""
    path = os.path.normpath(os.fspath(path))
    label = what or path
    if os.path.islink(path):
        raise ProbeError(f"{label}: is a symbolic link; refusing to write through it")
    if os.path.lexists(path):
        raise ProbeError(f"{label}: already exists; choose another name")
    return path


def check_folder(folder: str, what: str = "") -> str:
    """A folder to write into: not a link; absent or an empty folder."""
    folder = os.path.normpath(os.fspath(folder))
    label = what or folder
    if os.path.islink(folder):
        raise ProbeError(f"{label}: is a symbolic link; refusing to write through it")
    if os.path.lexists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise ProbeError(f"{label}: exists and is not an empty folder; choose a new one")
    return folder


def inside(folder: str, name: str) -> str:
    """``folder/name`` for a plain file name, refused when it would leave ``folder``."""
    if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
        raise ProbeError(f"{name!r}: not a plain file name")
    path = os.path.join(folder, name)
    if os.path.realpath(os.path.dirname(path)) != os.path.realpath(folder):
        raise ProbeError(f"{path}: leaves {folder}")
    return path


def open_new(path: str, binary: bool = True):
    """A new file at ``path`` opened for writing (refused if anything, a link included, is there)."""
    try:
        fd = os.open(path, _FLAGS, 0o644)
    except FileExistsError:
        raise ProbeError(f"{path}: already exists (a file or a link); refusing to overwrite it") from None
    except OSError as e:
        raise ProbeError(f"{path}: cannot create ({e.strerror})") from None
    return os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")


def write_new(path: str, data) -> int:
    """Write ``data`` (bytes or text) to the new file ``path``; returns its size in bytes."""
    binary = isinstance(data, bytes)
    with open_new(path, binary) as fh:
        fh.write(data)
    return os.path.getsize(path)

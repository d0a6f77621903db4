"""Opening the files a user names as inputs (JSON-lines logs, saved reports, state files, name maps,
foreign tensor files): regular files only, sizes bounded before reading, one line on every failure.

A FIFO given as an input hangs an ``open()`` for reading until a writer comes; a device such as
``/dev/zero`` never ends and grows a read until ``MemoryError``; a directory fails with a traceback.
Every read-side command goes through :func:`open_regular` (or :func:`read_bytes` / :func:`read_text`),
which opens without blocking (``O_NONBLOCK``), checks what it opened with ``fstat`` (no window between
the check and the open), refuses anything but a regular file, and refuses a file over ``max_bytes``
before reading it (and again if it grew while read).
"""
from __future__ import annotations

import errno
import os
import stat

from inkling_probe.errors import ProbeError

MAX_TEXT_BYTES = 1 << 30  # 1 GiB: JSON-lines logs, saved compare documents, state files


class BadInputFile(ProbeError, ValueError):
    """An input path that is missing, not a regular file, unreadable or too large (one line)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path, what: str = "input") -> os.stat_result:
    """``stat`` of ``path`` when it is a regular file (links followed), else :class:`BadInputFile`.

    For a path only inspected, not read (a check before a subprocess reads it); to read, use
    :func:`open_regular`, which checks what it actually opened."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise BadInputFile(f"{path}: can't read the {what} ({_why(e)})") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInputFile(f"{path}: {_kind(st.st_mode)}, not a regular file ({what})")
    return st


def open_regular(path, what: str = "input", max_bytes: int | None = MAX_TEXT_BYTES, text: bool = False,
                 encoding: str = "utf-8"):
    """``path`` opened for reading (binary, or text with ``text``) once it is known to be a regular
    file of at most ``max_bytes`` (None: any size). The caller closes it (a context manager)."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    except OSError as e:
        raise BadInputFile(f"{path}: can't read the {what} ({_why(e)})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInputFile(f"{path}: {_kind(st.st_mode)}, not a regular file ({what})")
        if max_bytes is not None and st.st_size > max_bytes:
            raise BadInputFile(f"{path}: {st.st_size} bytes, over the {_size(max_bytes)} limit ({what})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "r", encoding=encoding) if text else os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, what: str = "input", max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The whole of a regular file of at most ``max_bytes`` (checked before and while reading)."""
    with open_regular(path, what, max_bytes) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as e:
            raise BadInputFile(f"{os.fspath(path)}: can't read the {what} ({_why(e)})") from None
    if len(data) > max_bytes:
        raise BadInputFile(f"{os.fspath(path)}: grew past the {_size(max_bytes)} limit while read ({what})")
    return data


def read_text(path, what: str = "input", max_bytes: int = MAX_TEXT_BYTES, encoding: str = "utf-8") -> str:
    """:func:`read_bytes` decoded; undecodable bytes are :class:`BadInputFile` naming the offset."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise BadInputFile(f"{os.fspath(path)}: not {encoding} text (byte {e.start}) ({what})") from None


def _why(e: OSError) -> str:
    if e.errno == errno.EISDIR:
        return "a directory, not a regular file"
    return e.strerror or str(e)


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"

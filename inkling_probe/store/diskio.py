"""Positional writes into a segment file's descriptor (whole buffers, short writes retried) and
whether its file system is tmpfs."""
from __future__ import annotations

import os

_IOV_MAX = 512  # buffers per pwritev call (Linux allows 1024)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def _pwritev_all(fd: int, views: list, offset: int) -> None:
    """Write ``views`` back to back at ``offset``: one ``pwritev`` per ``_IOV_MAX`` buffers."""
    for i in range(0, len(views), _IOV_MAX):
        chunk = views[i: i + _IOV_MAX]
        want = sum(len(v) for v in chunk)
        n = os.pwritev(fd, chunk, offset)
        if n < want:  # a short write (a signal, a nearly full disk): the rest one by one
            done = n
            for v in chunk:
                if done >= len(v):
                    done -= len(v)
                    continue
                _pwrite_all(fd, v[done:], offset + n)
                n += len(v) - done
                done = 0
        offset += want


_TMPFS_MAGIC = 0x01021994
_IN_MEMORY: dict = {}  # st_dev -> is that file system tmpfs?


def _in_memory(fd: int) -> bool:
    """Is ``fd``'s file system tmpfs (a /tmp or /dev/shm in memory)? There ``fallocate`` zeroes
    every page before the write copies over it: twice the work (54 MB a GPU step: +60% of the
    writer's time here), so it is skipped. Asked once per device (``fstatfs``)."""
    dev = os.fstat(fd).st_dev
    known = _IN_MEMORY.get(dev)
    if known is None:
        import ctypes
        import struct

        buf = ctypes.create_string_buffer(256)  # struct statfs: f_type (a C long) first
        try:
            ok = ctypes.CDLL(None, use_errno=True).fstatfs(fd, buf) == 0
        except (OSError, AttributeError):
            ok = False
        known = _IN_MEMORY[dev] = ok and struct.unpack_from("l", buf)[0] == _TMPFS_MAGIC
    return known

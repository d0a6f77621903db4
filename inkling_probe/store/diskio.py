"""Positional writes into a segment file's descriptor (whole buffers, short writes retried), its
blocks reserved before them (``fallocate``), and whether its file system is tmpfs."""
from __future__ import annotations

import errno
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


_FALLOCATE = [None]  # libc's fallocate, found once; False where there is none or it is not supported


def _reserve_blocks(fd: int, offset: int, nbytes: int) -> None:
    """Allocate a dataset's blocks before its ``pwrite`` (Linux ``fallocate``): a buffered write
    into allocated blocks skips block allocation (16 MB into a new file: 4.5-6.7 ms -> 3.3-3.5 ms
    on an H200 host's /tmp, 5.4 -> 3.4 ms on ext4 here), and a full disk fails here, before any
    byte is written. Where the file system has no ``fallocate`` (EOPNOTSUPP) this is skipped from
    then on; glibc's ``posix_fallocate`` is not used: it would emulate it by writing zeros. Not
    called on tmpfs (:func:`_in_memory`, asked once a segment: an ``fstat`` a write cost a
    small CPU forward (161 writes) ~7 ms under cProfile, on a loaded 2-core machine)."""
    import ctypes

    call = _FALLOCATE[0]
    if call is None:
        try:
            call = ctypes.CDLL(None, use_errno=True).fallocate  # the C library this process runs
            call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        except (OSError, AttributeError):
            call = False
        _FALLOCATE[0] = call
    if call is False:
        return
    while call(fd, 0, offset, nbytes) != 0:
        code = ctypes.get_errno()
        if code != errno.EINTR:
            break
    else:
        return
    if code in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        _FALLOCATE[0] = False  # not this file system: plain writes
        return
    raise OSError(code, os.strerror(code))

"""A tensor's index row filled in (content hash and statistics), and a write failure in one line."""
from __future__ import annotations

import errno

import numpy as np

from inkling_probe.store.stats import NAN_STATS, array_stats, content_hash, hash_and_stats


def why(e: BaseException) -> str:
    """A one-line reason for a write failure, naming a full disk or a file size limit plainly."""
    text = str(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "errno = 28" in text or "No space left" in text:
        return "no space left on the device (disk full)"
    if getattr(e, "errno", None) == errno.EFBIG or "errno = 27" in text or "File too large" in text:
        return "file too large (a file size limit, RLIMIT_FSIZE, was reached)"
    first = text.splitlines()[0] if text else type(e).__name__
    return first[:200]


def _failed(row: dict, folder: str, e: BaseException) -> str:
    return f"recording {row['key']!r} (step {row['step']}) in {folder}: {why(e)}"


def _summarise(row: dict, array: np.ndarray, stats, each=None) -> None:
    """Fill in the row's content hash and statistics: computed (``stats`` True), given (a dict,
    computed on the GPU), or none (False: NaN and -1 counts). ``each(bytes, byte offset)`` is
    called on every 64K-value chunk of ``array`` while it is in the cache (the writer's
    ``pwrite``; stats.hash_and_stats)."""
    compute = bool(stats) and not isinstance(stats, dict)
    if each is None:  # (a packed tensor: in the cache already, and the fewer calls the better)
        row["hash"] = content_hash(array, row["dtype"], array.shape).encode()
        computed = array_stats(array, row["storage"], row["dtype"]) if compute else None
    else:
        whole = np.ascontiguousarray(array).reshape(array.shape)  # (ascontiguousarray makes a 0-d array 1-d)
        digest, computed = hash_and_stats(whole, row["dtype"], row["storage"], compute, each)
        row["hash"] = digest.encode()
    row.update(computed if compute else stats if isinstance(stats, dict) else _NO_STATS)


_NO_STATS = {**NAN_STATS, "nan": -1, "inf": -1}

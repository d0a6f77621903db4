"""How much a foreign file may be believed before any of its data is read.

Every reader reads what a file declares first (shapes, dtypes, strides, storage and member sizes)
and checks it against the file: a declared size the file does not hold is a lie (one line, exit 2).
What remains is bytes a file legitimately *reads as* beyond its own size: a compressed ``.npz``
member, a ``.pt`` tensor expanded with stride 0, one tensor listed under two names. That is bounded
by one setting:

``INKLING_PROBE_FOREIGN_INFLATE`` (default 256): a file may read as at most this many bytes of
tensors per byte of the file, or :data:`FLOOR_BYTES`, whichever is more. A real dump reads as
about its own size (a tied weight or an attention mask expanded over heads: a few times); the
default leaves room for a mask expanded over 128 heads and refuses a 1 MB ``.npz`` of zeros that
inflates to 1.1 GB, or a 1.3 KB ``.pt`` whose stride-0 tensor reads as 1.5 GB. So memory and
output of ``ls``, ``show`` and ``import`` stay proportional to the input's size.
"""
from __future__ import annotations

import os

from inkling_probe.errors import DumpError, SettingsError

INFLATE_VAR = "INKLING_PROBE_FOREIGN_INFLATE"
DEFAULT_INFLATE = 256
FLOOR_BYTES = 1 << 20  # a small file may always read as 1 MiB


def inflate(environ=None) -> int:
    """The ``INKLING_PROBE_FOREIGN_INFLATE`` ratio (a positive integer; default 256)."""
    text = (os.environ if environ is None else environ).get(INFLATE_VAR, "").strip()
    if not text:
        return DEFAULT_INFLATE
    if not text.isdecimal() or not text.isascii() or int(text) < 1:
        raise SettingsError(f"{INFLATE_VAR}={text!r}: expected a positive integer (default {DEFAULT_INFLATE})")
    return int(text)


def allowed_bytes(file_bytes: int, environ=None) -> int:
    """The most tensor bytes a file of ``file_bytes`` may read as."""
    return max(inflate(environ) * file_bytes, FLOOR_BYTES)


def check_reads_as(path: str, file_bytes: int, tensor_bytes: int, what: str = "its tensors") -> None:
    """A one-line DumpError when ``tensor_bytes`` (what ``path`` reads as) passes the bound."""
    bound = allowed_bytes(file_bytes)
    if tensor_bytes > bound:
        raise DumpError(f"{path}: {what} read as {_size(tensor_bytes)} from a file of {_size(file_bytes)} "
                        f"(more than {INFLATE_VAR}={inflate()} times its size); refused "
                        f"(raise {INFLATE_VAR} if the file is what you expect)")


def _size(n: int) -> str:
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"

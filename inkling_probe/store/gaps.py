"""What is missing from a run of numbers (ranks of a world, segments of a rank), told as ranges.

A dump's numbers come from untrusted names and headers: a file named ``rank=99999999999`` or a
world size of 10**12 must cost what the files present cost, not a set of every number up to it.
:func:`missing` walks the numbers present (sorted) and yields the gaps between them; the text form
names the first few ranges (``3..99999999998``) and how many numbers are missing in all.
"""
from __future__ import annotations

from collections.abc import Iterable


def missing(present: Iterable[int], total: int) -> list[tuple[int, int]]:
    """The ranges ``(first, last)`` (inclusive) of ``0..total-1`` not in ``present``; numbers of
    ``present`` outside that span are ignored (the caller refuses them)."""
    out, expected = [], 0
    for n in sorted(set(present)):
        if not 0 <= n < total:
            continue
        if n > expected:
            out.append((expected, n - 1))
        expected = n + 1
    if expected < total:
        out.append((expected, total - 1))
    return out


def count(ranges: list[tuple[int, int]]) -> int:
    """How many numbers ``ranges`` hold."""
    return sum(last - first + 1 for first, last in ranges)


def text(ranges: list[tuple[int, int]], shown: int = 3) -> str:
    """``"1, 3..99999999998"``: the first ``shown`` ranges (and '...' when there are more)."""
    parts = [str(a) if a == b else f"{a}..{b}" for a, b in ranges[:shown]]
    return ", ".join(parts) + (", ..." if len(ranges) > shown else "")

"""Test helper for the property suite (test_mutants.py): byte mutations of a file, and the check
every mutant must pass when read through the API (``inkling_probe.open`` and every tensor read).

The rule (issue 42): a mutant reads with the values an independent reader gives for it, or is one
ProbeError line naming the file; never another exception; the Python memory it takes (tracemalloc
peak) stays under a bound proportional to its size (store/foreign/limits.py, with the floor and
ratio made small for the suite); its time under a bound.
"""
from __future__ import annotations

import itertools
import os
from collections import Counter
import time
import tracemalloc

import numpy as np
from hypothesis import strategies as st

import inkling_probe
from inkling_probe.errors import ProbeError
from inkling_probe.store.foreign import limits

INFLATE = 8  # the suite's INKLING_PROBE_FOREIGN_INFLATE
FLOOR = 16 << 10  # and floor (limits.FLOOR_BYTES), so that a bound proportional to size is tested
OVERHEAD = 512 << 10  # Python objects of one open (index rows, the unpickler's memo) beyond the tensors
SECONDS = 5.0  # one mutant, read whole: generous for a loaded 2-core machine; the failure it catches is a hang

_names = itertools.count()
TALLY: Counter = Counter()  # (suffix, "read" | "refused") of every mutant checked in this process


@st.composite
def byte_edits(draw, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped or overwritten, a run deleted or inserted."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "set", "delete", "insert"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "truncate":
            del out[at:]
        elif kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and out:
            out[at] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif kind == "delete":
            del out[at: at + draw(st.integers(1, 16))]
        else:
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(out)


def new_path(folder, suffix: str) -> str:
    """A fresh file name per case: no cache of an earlier mutant's file can answer for this one."""
    return os.path.join(folder, f"m{next(_names)}{suffix}")


def check_files(folder, suffix: str, blobs: list[bytes], reference) -> list:
    """Each of ``blobs`` written to a new file and held to :func:`check`; ``reference(path)`` reads
    one independently. A blob whose first bytes no longer tell its format is checked too: it must
    be refused by name."""
    out = []
    for blob in blobs:
        path = new_path(folder, suffix)
        with open(path, "wb") as fh:
            fh.write(blob)
        out.append(check(path, lambda: reference(path)))
    return out


def read_all(path) -> dict:
    """{(key, step, rank, call): array} of every tensor, read one rank at a time."""
    d = inkling_probe.open(path)
    try:
        return {(r["key"], r["step"], r["rank"], r["call"]): d.array(r["key"], r["step"], rank=r["rank"], call=r["call"])
                for r in d.index}
    finally:
        d.close()


def check(path, reference, size: int | None = None) -> dict | None:
    """Read ``path`` through the API and hold it to the rule; ``reference()`` gives what an
    independent reader makes of the file ({key: array}, keys as the API names them), called only
    when the API accepted it. Returns what the API read (None: refused)."""
    size = os.path.getsize(path) if size is None else size
    tracemalloc.start()  # traced only while the API reads (not while hypothesis draws)
    start = time.perf_counter()
    try:
        got = read_all(path)
    except ProbeError as e:
        got, message = None, str(e)
        assert "\n" not in message and os.path.basename(os.path.normpath(path)) in message, message
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < SECONDS, (path, elapsed)
    assert peak < 4 * max(INFLATE * size, FLOOR) + OVERHEAD, (path, size, peak)
    TALLY[os.path.splitext(str(path))[1] or "folder", "refused" if got is None else "read"] += 1
    if got is not None:
        want = {k if isinstance(k, tuple) else (k, 0): v for k, v in reference().items()}
        got_by = {(key, rank): array for (key, _, rank, _), array in got.items()}
        assert len(got_by) == len(got) and sorted(got_by) == sorted(want), (sorted(got), sorted(want))
        for ident, array in got_by.items():
            assert same(array, want[ident]), (ident, array, want[ident])
    return got


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and bits (NaN payloads included); bf16 references come as float32 too."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == np.bool_ and b.dtype == np.bool_:  # a bool byte other than 0/1 is still true
        a, b = a.view(np.uint8) != 0, b.view(np.uint8) != 0
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def small_limits(monkeypatch) -> None:
    """The suite's bound: a ratio of 8 and a floor of 16 KiB (the defaults are 256 and 1 MiB)."""
    monkeypatch.setenv(limits.INFLATE_VAR, str(INFLATE))
    monkeypatch.setattr(limits, "FLOOR_BYTES", FLOOR)

"""Streaming a plain pair: both tensors read chunk by chunk and reduced, never held whole.

A pair whose two tensors are each one plain contiguous dataset of our own dumps (store/raw.py),
of the same stored dtype and shape, is measured without loading either array: each chunk of values
(metrics.chunk_size: the chunks the metrics' pass takes anyway, whole token rows) is read by
``preadv`` into a buffer reused from chunk to chunk and key to key, reduced, and overwritten by the
next. bfloat16 chunks are widened in a second reused buffer to the exact float32 values the loaded
array holds (bits << 16). The metrics and row sums are bit for bit those of the loaded pair (the
same values in the same chunks, in the same order, through the same code); memory is a few chunk
buffers whatever the tensor's size.

measure.py decides when a pair may stream (nothing to conform, realign, set aside or keep);
:func:`open_pair` says None for anything not plain (packs, shards, foreign dumps, packed fp4, two
stored dtypes, a damaged or truncated file), and the pair is loaded as before.
"""
from __future__ import annotations

import os

import numpy as np

from inkling_probe.compare.metrics import chunk_size, reduce_chunks
from inkling_probe.compare.values import FP4
from inkling_probe.store import raw
from inkling_probe.store.stats import bf16_bits_to_float32


class Plain:
    """The two open datasets of a pair (``with``: the file descriptors are closed after)."""

    def __init__(self, sides: list, shape: tuple, what: tuple):
        self.sides, self.shape, self.what = sides, shape, what  # [(fd, Plan)] reference, candidate

    def reduce(self, atol: float, rtol: float, width: int | None, columns: bool = False):
        """(Metrics, Sums) of the pair, as metrics.reduce_values gives them for the loaded arrays."""
        n, size = raw.numel(self.sides[0][1]), chunk_size(width)
        return reduce_chunks(self._chunks(n, size), n, self.shape, atol, rtol, width, columns)

    def _chunks(self, n: int, size: int):
        m = min(size, n)
        bufs = [raw.scratch(slot, p.dtype, m) for slot, (_, p) in enumerate(self.sides)]
        wide = [raw.scratch(2 + slot, np.uint32, m) if p.bf16 else None for slot, (_, p) in enumerate(self.sides)]
        for start in range(0, n, size):
            k = min(size, n - start)
            yield start, *(_values(raw.read_into(fd, p, start, b[:k], what), w)
                           for (fd, p), b, w, what in zip(self.sides, bufs, wide, self.what))

    def close(self) -> None:
        for fd, _ in self.sides:
            os.close(fd)
        self.sides = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _values(chunk: np.ndarray, wide: np.ndarray | None) -> np.ndarray:
    """The chunk's values: itself, or for bfloat16 bits (``wide``: a uint32 scratch buffer) their
    exact float32 values, as the loaded array holds them."""
    return chunk if wide is None else bf16_bits_to_float32(chunk, wide[:chunk.size])


def open_pair(ref_dump, ref, cand_dump, cand) -> Plain | None:
    """Both entries' datasets when the pair can stream (module docstring), else None."""
    from inkling_probe.store.dump import Dump

    if type(ref_dump) is not Dump or type(cand_dump) is not Dump:  # noqa: E721 (our own reads only)
        return None
    rows = [_one_row(ref_dump, ref), _one_row(cand_dump, cand)]
    if None in rows or tuple(rows[0]["shape"]) != tuple(rows[1]["shape"]) or ref.dtype != cand.dtype or ref.dtype == FP4:
        return None  # packed fp4 bytes are not values
    sides, pair = [], None
    try:
        for dump, row in zip((ref_dump, cand_dump), rows):
            got = raw.plain(dump, row)
            if got is not None:
                sides.append(got)
            if got is None or got[1].dtype != sides[0][1].dtype or got[1].bf16 != sides[0][1].bf16:
                return None
        what = tuple(f"{d.segments[r['_segment']].path}: {r['dataset']!r}" for d, r in zip((ref_dump, cand_dump), rows))
        pair = Plain(sides, tuple(rows[0]["shape"]), what)
        return pair
    finally:
        if pair is None:  # not streamed, or failed: the descriptors taken so far are ours to close
            for fd, _ in sides:
                os.close(fd)


def _one_row(dump, e) -> dict | None:
    """The one index row ``dump.array`` would read the entry's values from, or None."""
    try:
        rows = dump._pick(e.key, e.step, None, e.call)
    except Exception:  # missing ranks and the like: the ordinary read says so
        return None
    if len(rows) != 1 and rows[0]["shard"] != "replicated":
        return None
    return rows[0]

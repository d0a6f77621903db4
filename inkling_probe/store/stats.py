"""Per-tensor summary statistics and content hash, computed from the stored numpy array.

numpy only (no torch), so the writer process stays light. numpy on the host copy is ~5x cheaper per
small tensor than torch reductions on this class of machine.
"""
from __future__ import annotations

import math

import numpy as np
import xxhash

STAT_FIELDS = ("mean", "rms", "absmax", "nan", "inf")
_SUMMED = (np.dtype(np.float32), np.dtype(np.float64))  # summed as they are
NAN_STATS = {"mean": float("nan"), "rms": float("nan"), "absmax": float("nan"), "nan": 0, "inf": 0}


def bf16_bits_to_float32(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> their exact float32 values (bits << 16), NaN payloads kept;
    into ``out`` (a uint32 buffer of the same size, reused by the caller) where given."""
    return np.left_shift(np.asarray(bits, dtype=np.uint16), 16, out=out, dtype=np.uint32).view(np.float32)


def float32_to_bf16_bits(wide: np.ndarray) -> np.ndarray:
    """The inverse for exact float32 forms of bf16 values (bits << 16): their bit patterns (uint16)."""
    return (np.ascontiguousarray(wide, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def array_stats(array: np.ndarray, storage: str, dtype: str = "") -> dict:
    """mean, rms and absmax over the finite values, and NaN and Inf counts.

    ``array`` is the stored form (``encode``'s output, exact values; for ``dtype`` bfloat16 stored
    natively, its bits); raw packed fp4 bytes are not numbers and get NaN statistics (decode them
    to values to summarise them).
    """
    if array.size == 0 or storage == "raw":
        return dict(NAN_STATS)
    a = _summed(array.reshape(-1), dtype)
    # BLAS dots of 64K values (the sum a dot with ones) added in float64: relative error ~1e-6,
    # plenty for a summary (compare computes its metrics in float64). A finite sum and dot mean every
    # value is finite.
    with np.errstate(over="ignore", invalid="ignore"):
        sums = _sums(a)
    return _stats_from_sums(a, sums)


def hash_and_stats(array: np.ndarray, dtype: str, storage: str, stats: bool,
                   each=None) -> tuple[str, dict | None]:
    """(:func:`content_hash`, :func:`array_stats` or None without ``stats``) of a C-contiguous array in
    one pass over its memory, 64K values at a time: each chunk is hashed, summed and handed to
    ``each(bytes, byte offset)`` (the writer's ``pwrite``) while it is in the cache, instead of a
    pass over the whole tensor for each (small's 206 tensors, 97 MB, on one core of the 2-core
    machine: hashed and summarised in 17.6 ms against 9.8 + 15.4 ms apart). The same chunks and
    order as the separate calls, so the same bits; a tensor with a NaN or an infinity takes
    :func:`array_stats`' masked path from these sums."""
    flat = array.reshape(-1)
    h = _hash_state(dtype, array.shape)
    summed = stats and storage != "raw" and flat.size
    parts = []
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, flat.size, _DOT_CHUNK):
            c = flat[i: i + _DOT_CHUNK]
            h.update(c.data)
            if summed:
                parts.append(_chunk_sums(_summed(c, dtype)))
            if each is not None:
                each(memoryview(c).cast("B"), i * flat.itemsize)
    if not stats:
        return h.hexdigest(), None
    if not summed:
        return h.hexdigest(), dict(NAN_STATS)
    sums = _fold(parts)
    if not (math.isfinite(sums[0]) and math.isfinite(sums[1])):  # the finite values alone, counted
        return h.hexdigest(), _stats_from_sums(_summed(flat, dtype), sums)
    return h.hexdigest(), summary(flat.size, sums[0], sums[1], max(sums[2], -sums[3]), 0, 0)


def _summed(a: np.ndarray, dtype: str) -> np.ndarray:
    """1-D stored values as the float type they are summed in (bf16 bits as float32, ints as float64)."""
    if a.dtype not in _SUMMED:
        if dtype == "bfloat16" and a.dtype == np.uint16:
            a = bf16_bits_to_float32(a)
        if a.dtype.kind != "f" or a.dtype.itemsize < 4:
            a = a.astype(np.float64 if a.dtype.kind in "iub" else np.float32)
    return a


def _stats_from_sums(a: np.ndarray, sums: tuple) -> dict:
    """The statistics of 1-D float ``a`` whose :func:`_fold`ed sums are ``sums``: where they are not
    finite, the NaNs and infinities are counted and the finite values summed alone."""
    total, sq, high, low = sums
    nan = inf = 0
    if not (math.isfinite(total) and math.isfinite(sq)):
        finite = np.isfinite(a)
        nan = int(np.count_nonzero(np.isnan(a)))
        inf = a.size - int(np.count_nonzero(finite)) - nan
        a = a[finite]  # a mask's -inf, a blow-up's NaN: the finite values alone
        if a.size == 0:
            return {**NAN_STATS, "nan": nan, "inf": inf}
        with np.errstate(over="ignore", invalid="ignore"):
            total, sq, high, low = _sums(a)
        if not (math.isfinite(total) and math.isfinite(sq)):  # finite values whose sums overflow
            wide = a.astype(np.float64)
            total, sq = float(wide.sum()), float(np.dot(wide, wide))
    return summary(a.size, total, sq, max(high, -low), nan, inf)


_DOT_CHUNK = 1 << 16
_ONES: dict = {}  # dtype -> _DOT_CHUNK ones of it, for sums as dots


def _sums(a: np.ndarray) -> tuple[float, float, float, float]:
    """(sum, sum of squares, max, min) of 1-D float ``a``, chunk by chunk: 64K values (256 KB of
    float32) stay in cache for the four passes, and the sums are BLAS dots (a float32 sum as a dot
    with ones: 4x numpy's pairwise sum, the same error), added in float64."""
    if a.size <= _DOT_CHUNK:
        return _chunk_sums(a)
    return _fold(_chunk_sums(a[i: i + _DOT_CHUNK]) for i in range(0, a.size, _DOT_CHUNK))


def _chunk_sums(c: np.ndarray) -> tuple[float, float, float, float]:
    """(sum, sum of squares, max, min) of at most ``_DOT_CHUNK`` float values."""
    ones = _ONES.get(c.dtype)
    if ones is None:
        ones = _ONES.setdefault(c.dtype, np.ones(_DOT_CHUNK, dtype=c.dtype))
    return float(np.dot(c, ones[: c.size])), float(np.dot(c, c)), float(c.max()), float(c.min())


def _fold(parts) -> tuple[float, float, float, float]:
    """Chunks' sums added in order; one chunk's as they are (0.0 + -0.0 would lose the sign)."""
    parts = iter(parts)
    first = next(parts)
    second = next(parts, None)
    if second is None:
        return first
    total = sq = 0.0
    high, low = -math.inf, math.inf
    for s, q, hi, lo in (first, second, *parts):
        total += s
        sq += q
        high, low = max(high, hi), min(low, lo)
    return total, sq, high, low


def summary(finite: int, total: float, sq: float, absmax: float, nan: int, inf: int) -> dict:
    """The statistics of ``finite`` finite values with this sum, sum of squares and absmax."""
    if finite == 0:
        return {**NAN_STATS, "nan": nan, "inf": inf}
    return {"mean": total / finite, "rms": (sq / finite) ** 0.5, "absmax": absmax, "nan": nan, "inf": inf}


def summary_from_sums(numel: int, total: float, sq: float, absmax: float, nonfinite: float, nan: float) -> dict:
    """Statistics from sums over the finite values computed elsewhere (on the GPU, recorder/step_batch.py)."""
    nonfinite, nan = int(nonfinite), int(nan)
    return summary(numel - nonfinite, float(total), float(sq), float(absmax), nan, nonfinite - nan)


def content_hash(array: np.ndarray, dtype: str, shape) -> str:
    """16 hex digits of XXH3-64 over the original dtype name, the shape and the stored bytes.

    The stored form is a bijection of the original bits (docs/FORMAT.md), so equal hashes mean
    bit-identical tensors of the same dtype and shape.
    """
    h = _hash_state(dtype, shape)
    if array.size:
        h.update(array.data if array.flags.c_contiguous else np.ascontiguousarray(array).data)
    return h.hexdigest()


def _hash_state(dtype: str, shape):
    """A fresh XXH3 state that has hashed "dtype:shape:" (the prefix hashed once per (dtype, shape):
    a copy costs a fifth of hashing it)."""
    key = (dtype, tuple(shape))
    prefix = _PREFIXES.get(key)
    if prefix is None:
        if len(_PREFIXES) > 4096:
            _PREFIXES.clear()
        prefix = _PREFIXES[key] = xxhash.xxh3_64(f"{dtype}:{tuple(int(s) for s in shape)}:".encode())
    return prefix.copy()


_PREFIXES: dict = {}  # (dtype, shape) -> an XXH3 state that has hashed "dtype:shape:"

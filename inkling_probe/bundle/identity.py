"""A checkpoint's identity: which checkpoint a dump was recorded from, so that ``report --ckpt`` and
``extract --ckpt`` can refuse one that is not the candidate's.

The identity is ``config=<16 hex> weights=<16 hex>``: SHA-256 prefixes of ``config.json``'s bytes and
of the weights' index, that is ``model.safetensors.index.json`` (or, for one ``model.safetensors``,
nothing) plus every shard's file name, size, safetensors header (names, dtypes, shapes, offsets) and
its first and last 64 KiB of data. Reading a few KiB per shard, it tells a bf16 checkpoint from its
NVFP4 twin and two seeds of one preset apart; it is a fingerprint of the files, not a hash of every
byte. 16 hex digits each, so the environment's secret redaction (32+ hex) leaves it readable.

A run records it in its environment as ``INKLING_CHECKPOINT_ID`` (``inkling-probe run`` sets it for
its ranks), which the recorder keeps in every dump's run metadata (``run.env``).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct

ENV = "INKLING_CHECKPOINT_ID"
INDEX = "model.safetensors.index.json"
_SAMPLE = 64 << 10
_MAX_HEADER = 100 << 20  # safetensors' own limit


class IdentityError(ValueError):
    """The folder is not a checkpoint whose identity can be taken (one line, naming the file)."""


def checkpoint_identity(ckpt) -> str:
    """``config=<16 hex> weights=<16 hex>`` of the checkpoint folder ``ckpt``."""
    ckpt = os.fspath(ckpt)
    config = os.path.join(ckpt, "config.json")
    if not os.path.isfile(config):
        raise IdentityError(f"{ckpt}: no config.json (not a checkpoint folder)")
    with open(config, "rb") as fh:
        config_hash = hashlib.sha256(fh.read()).hexdigest()[:16]
    weights = hashlib.sha256()
    for shard in _shards(ckpt, weights):
        _fingerprint(os.path.join(ckpt, shard), shard, weights)
    return f"config={config_hash} weights={weights.hexdigest()[:16]}"


def _shards(ckpt: str, digest) -> list[str]:
    index = os.path.join(ckpt, INDEX)
    if os.path.isfile(index):
        with open(index, "rb") as fh:
            raw = fh.read()
        digest.update(raw)
        try:
            files = sorted(set(json.loads(raw)["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise IdentityError(f"{index}: not a safetensors index (no weight_map)") from None
        if not all(isinstance(f, str) and f and os.path.basename(f) == f for f in files):
            raise IdentityError(f"{index}: weight_map names a file outside the folder")
        return files
    if os.path.isfile(os.path.join(ckpt, "model.safetensors")):
        return ["model.safetensors"]
    raise IdentityError(f"{ckpt}: no {INDEX} and no model.safetensors")


def _fingerprint(path: str, shard: str, digest) -> None:
    if not os.path.isfile(path):
        raise IdentityError(f"{path}: named by the index, missing")
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < n <= min(_MAX_HEADER, size - 8):
            raise IdentityError(f"{path}: not a safetensors file (header length {n})")
        header = fh.read(n)
        first = fh.read(_SAMPLE)
        fh.seek(max(8 + n, size - _SAMPLE))
        last = fh.read(_SAMPLE)
    digest.update(f"\0{shard}\0{size}\0".encode())
    for part in (header, first, last):
        digest.update(part)


def recorded(dump) -> str | None:
    """The identity a dump's run recorded (rank 0's, else any rank's), or None."""
    for seg in getattr(dump, "segments", None) or []:
        env = (seg.run or {}).get("env") or {}
        if env.get(ENV):
            return str(env[ENV])
    return None


def check(ckpt, expected: str | None, what: str = "the candidate") -> str:
    """``ckpt``'s identity; raises :class:`IdentityError` when ``expected`` is given and differs."""
    found = checkpoint_identity(ckpt)
    if expected is not None and found != expected:
        raise IdentityError(f"--ckpt {ckpt}: not {what}'s checkpoint ({found}; {what} was recorded from "
                            f"{expected})")
    return found

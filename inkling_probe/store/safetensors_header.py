"""A safetensors file's header, read as untrusted input with numpy alone: every entry checked against
the file before any caller maps or reshapes its bytes.

Layout: 8 bytes little-endian N, N bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [a, b]},
"__metadata__": {...}}``, then the data; entry bytes lie at ``8 + N + a .. 8 + N + b``. A damaged or
crafted file (N of 2^62, offsets past the end, an unknown dtype, a shape that doesn't match its
bytes, a header that isn't an object, a name given twice, two entries sharing bytes) is one
:class:`BadSafetensors` line naming the file and entry, never a MemoryError, KeyError or reshape
error, and never more tensor bytes than the file holds. The file must be a regular file (store/inputs.py).
"""
from __future__ import annotations

import json
import math
import os
import struct

from inkling_probe.errors import ProbeError
from inkling_probe.store.inputs import BadInputFile, open_regular

ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
              "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit


class BadSafetensors(ProbeError, ValueError):
    """A file that is not a well-formed safetensors file (one line: the file and what is wrong)."""


def read_header(path) -> tuple[dict[str, dict], int]:
    """({name: {"dtype", "shape" (tuple), "data_offsets" (a, b)}}, where the data starts), every entry
    checked: a known dtype, a shape of ints >= 0, offsets inside the file whose span holds exactly
    ``prod(shape) x item size`` bytes. ``__metadata__`` is left out."""
    path = os.fspath(path)
    try:
        with open_regular(path, "safetensors file", max_bytes=None) as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise BadSafetensors(f"{path}: not a safetensors file ({len(head)} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_HEADER_BYTES, size - 8):
                raise BadSafetensors(f"{path}: not a safetensors file (header of {n} bytes in a file of {size})")
            text = fh.read(n)
    except BadInputFile as e:
        raise BadSafetensors(str(e)) from None
    try:
        doc = json.loads(text, object_pairs_hook=_pairs)
    except _Twice as e:
        raise BadSafetensors(f"{path}: {e.args[0][:80]!r} is given twice in one object of the header; "
                             "refused: one would be dropped") from None
    except (ValueError, RecursionError) as e:
        raise BadSafetensors(f"{path}: not a safetensors file (header is not JSON: {e})") from None
    if not isinstance(doc, dict):
        raise BadSafetensors(f"{path}: not a safetensors file (header is a JSON {type(doc).__name__})")
    start = 8 + n
    header = {name: _entry(path, name, meta, size - start) for name, meta in doc.items() if name != "__metadata__"}
    _check_back_to_back(path, header, size - start)
    return header, start


class _Twice(ValueError):
    pass


def _pairs(pairs: list) -> dict:
    """A JSON object's pairs as a dict; a name given twice raises (json.loads keeps the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise _Twice(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def _check_back_to_back(path: str, header: dict, data_bytes: int) -> None:
    """Entries hold the data back to back, each byte once, as safetensors writes them and its own
    loader demands: overlapping entries read the same bytes again (a 1 MB file could read as 400 MB),
    and a gap or trailing bytes are bytes no entry accounts for."""
    end, last = 0, None
    for (a, b), name in sorted((e["data_offsets"], name) for name, e in header.items()):
        if a < end:
            raise BadSafetensors(f"{path}: tensors {last[:80]!r} and {name[:80]!r} overlap at bytes [{a}, {end}]; "
                                 "a safetensors file holds each tensor's bytes once")
        if a > end:
            raise BadSafetensors(f"{path}: tensor {name[:80]!r} starts at byte {a}, after a gap of {a - end} bytes "
                                 "no entry holds; not a safetensors file's layout")
        end, last = b, name
    if end != data_bytes:
        raise BadSafetensors(f"{path}: its entries hold {end} bytes of the file's {data_bytes} data bytes; "
                             "not a safetensors file's layout")


def _entry(path: str, name: str, meta, data_bytes: int) -> dict:
    def bad(why: str) -> BadSafetensors:
        return BadSafetensors(f"{path}: tensor {name[:80]!r}: {why}")

    if not isinstance(meta, dict):
        raise bad("its entry is not an object")
    dtype, shape, offsets = meta.get("dtype"), meta.get("shape"), meta.get("data_offsets")
    if dtype not in ITEM_BYTES:
        raise bad(f"unknown dtype {str(dtype)[:20]!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise bad("shape is not a list of integers >= 0")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise bad("data_offsets is not [begin, end]")
    a, b = offsets
    if not 0 <= a <= b <= data_bytes:
        raise bad(f"data_offsets [{a}, {b}] outside the file's {data_bytes} data bytes")
    want = math.prod(shape) * ITEM_BYTES[dtype]
    if b - a != want:
        raise bad(f"shape {shape} of {dtype} needs {want} bytes, data_offsets span {b - a}")
    return {"dtype": dtype, "shape": tuple(shape), "data_offsets": (a, b)}

"""Reading JSON-lines inputs: every problem is one :class:`EvalInputError` naming file, line, key, value."""
from __future__ import annotations

import json
import math

from inkling_probe.errors import ProbeError


class EvalInputError(ProbeError, ValueError):
    """Bad eval input: the message names the file (and line, key, value where there is one)."""


def read(path: str) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of ``path``; each line must be a JSON object."""
    from inkling_probe.store.inputs import BadInputFile, read_text

    try:  # a regular file of at most 1 GiB: a FIFO would hang, /dev/zero grow to MemoryError
        lines = read_text(path, "JSON-lines file").splitlines(keepends=True)
    except BadInputFile as e:
        raise EvalInputError(str(e)) from None
    out = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise EvalInputError(f"{path}:{n}: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise EvalInputError(f"{path}:{n}: expected a JSON object, got {type(obj).__name__}")
        out.append((n, obj))
    if not out:
        raise EvalInputError(f"{path}: no records (empty file)")
    return out


def bad(path: str, line: int, key: str, value, want: str) -> EvalInputError:
    """The error for ``key`` = ``value`` on ``path:line`` that should have been ``want``."""
    shown = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return EvalInputError(f"{path}:{line}: {key} = {shown[:60]}: expected {want}")


def int_list(path: str, line: int, obj: dict, key: str, required: bool = True) -> list[int]:
    """``obj[key]`` as a list of ints (token ids)."""
    v = obj.get(key)
    if v is None and not required:
        return []
    if not isinstance(v, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        raise bad(path, line, key, v, "a list of integer token ids")
    return v

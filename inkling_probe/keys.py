"""The one rule for a key's characters, shared by recording and the foreign readers: what recording
accepts, every command can print, store as JSON and write into a report bundle; what no command can
report, neither recording nor a foreign dump lets in.

A key is refused when it holds a control character (Unicode category Cc: a newline, a tab, NUL,
DEL, ...) or a lone surrogate (U+D800-U+DFFF: not encodable as UTF-8, so printing it fails); the
error names the key with those characters escaped (``repr``) and says which one and where.
"""
from __future__ import annotations

import unicodedata


def key_problem(name: str) -> str | None:
    """Why ``name`` can't be a key (one phrase), or None when it can."""
    for i, c in enumerate(name):
        if 0xD800 <= ord(c) <= 0xDFFF:
            return f"a lone surrogate U+{ord(c):04X} at index {i} (not encodable as UTF-8)"
        if unicodedata.category(c) == "Cc":
            return f"a control character U+{ord(c):04X} at index {i}"
    return None

r"""Name-map patterns that can't hang the tool: every pattern runs under RE2, whose matching time is
linear in the key's length whatever the pattern.

Python's ``re`` backtracks: a repeated group that can match in several ways (``(a+)+b``) takes time
exponential in the key length on a near miss, and so do adjacent overlapping repetitions, polynomially
(``a*a*a*a*b``, ``.*.*.*.*.*.*=x``: seconds per key at four stars, no end at eight). No static check
over Python's syntax catches every such pattern, so patterns are not run by ``re`` at all: RE2 (the
``google-re2`` package) simulates the automaton instead of backtracking, so each match costs at most
(key length x pattern size) steps, with the same leftmost-first groups Python would give.

What that costs a map's author, each refused with a one-line reason when the map loads:

- look-arounds (``(?=``, ``(?!``, ``(?<=``, ``(?<!``) and back-references (``\1`` in a pattern) are
  not supported (they are what makes linear-time matching impossible);
- ``\d``, ``\w``, ``\s`` and ``\b`` are ASCII classes (Python's are Unicode); probe keys are ASCII
  module paths, so this changes no real match. ``\Z`` is not needed (a rule matches the whole key);
- repetition counts are at most 1000, and a set that Python reads one way and RE2 another
  (``[[:alpha:]]``, which Python warns about) is refused.

Patterns are also checked by Python's own parser first, so a map valid for RE2 but not for ``re``
(or the reverse) is refused rather than read two ways. Keys are bounded at :data:`MAX_KEY_CHARS`.
"""
from __future__ import annotations

import re
import warnings

try:  # Python 3.11+: the parser lives in re._parser (sre_parse is deprecated). Parsed, not compiled:
    from re import _parser as _p  # re.compile's cache would hide a warning given once already
except ImportError:  # pragma: no cover - older Pythons
    import sre_parse as _p

MAX_KEY_CHARS = 1024
MAX_PATTERN_CHARS = 2000
_MAX_PROGRAM_BYTES = 8 << 20  # RE2's memory budget per pattern (its default); the DFA falls back to
#                               the NFA within it, still linear


def compile_bounded(pattern: str):
    """The pattern compiled by RE2 (``fullmatch``/``match``/``search`` returning ``re``-like matches
    with ``groups()`` and ``expand()``), or ValueError naming why it can't be matched in linear time."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    with warnings.catch_warnings():  # Python's "possible nested set": RE2 reads it as a POSIX class
        warnings.simplefilter("error", FutureWarning)
        try:
            _p.parse(pattern)  # re.error for plain syntax errors, in Python's words
        except FutureWarning as w:
            raise ValueError(f"{w}: Python and RE2 read this set differently; escape the '['") from None
    re2 = _re2()
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_PROGRAM_BYTES
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        raise ValueError(f"{_why(e)}; name-map patterns run under RE2, which matches in linear time "
                         "and has no look-arounds or back-references") from None


def _why(error) -> str:
    """RE2's reason, as text (it comes as bytes)."""
    reason = error.args[0] if error.args else error
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


def _re2():
    try:
        import re2
    except ImportError:  # pragma: no cover - a dependency of the package
        raise ValueError("name maps need the google-re2 package (pip install google-re2) to match in "
                         "linear time") from None
    return re2


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_TEMPLATE_PART = re.compile(r"\\(?:g<([^>]*)>|(0[0-7]{0,2}|[1-7][0-7]{2})|([1-9][0-9]?)|(.?))", re.S)


def compile_template(template: str, pattern) -> list:
    """``template`` (``re.expand``'s syntax: ``\\1``, ``\\g<name>``, ``\\n``...) as a list of literal
    strings and group references, checked against ``pattern``'s groups; ValueError when it can't
    expand. :func:`expand` applies it to a match. RE2's own ``expand`` reads non-ASCII text wrongly."""
    parts: list = []
    pos = 0
    for m in _TEMPLATE_PART.finditer(template):
        parts.append(template[pos:m.start()])
        pos = m.end()
        name, octal, number, other = m.groups()
        if name is not None:
            parts.append(_group(name if not name.isdigit() else int(name), pattern))
        elif octal is not None:
            parts.append(chr(int(octal, 8)))
        elif number is not None:
            parts.append(_group(int(number), pattern))
        elif other in _ESCAPES:
            parts.append(_ESCAPES[other])
        elif other == "" or (other.isascii() and other.isalpha()):
            raise ValueError(f"bad escape \\{other} in the target")
        else:
            parts.append("\\" + other)
    parts.append(template[pos:])
    return [p for p in parts if p != ""]


def expand(parts: list, match) -> str:
    """The target built by :func:`compile_template`'s ``parts`` from ``match`` (an unmatched group is '')."""
    return "".join(p if isinstance(p, str) else (match.group(p[0]) or "") for p in parts)


def _group(ref, pattern) -> tuple:
    """A group reference (a 1-tuple, so it can't be taken for literal text), checked against the pattern."""
    if isinstance(ref, str):
        if ref not in pattern.groupindex:
            raise ValueError(f"the target names group {ref!r}, which the pattern does not have")
        return (pattern.groupindex[ref],)
    if ref > pattern.groups:
        raise ValueError(f"the target refers to group {ref}; the pattern has {pattern.groups}")
    return (ref,)

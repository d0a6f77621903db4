r"""Name-map patterns that can't hang the tool: patterns whose matching time can explode are refused
when the map loads, and keys are bounded in length.

Python's ``re`` backtracks, so a repeated group that can itself match in several ways (``(a+)+``,
``(a|a)*``, ``(.*,)*x``) takes time exponential in the key length on a near miss. Such a pattern
is refused with a one-line reason, unless each pass of the repeated group must start with a literal
character that nothing repeated inside it can match (``(\.\w+)*``: the dots fix where every pass
starts, so it matches in one way only). Everything else backtracks at most polynomially, and with keys
of at most :data:`MAX_KEY_CHARS` characters that stays within milliseconds.
"""
from __future__ import annotations

import re

try:  # Python 3.11+: the parser lives in re._parser (sre_parse is deprecated)
    from re import _constants as _c, _parser as _p
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _c
    import sre_parse as _p

MAX_KEY_CHARS = 1024
MAX_PATTERN_CHARS = 2000
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None))


def compile_bounded(pattern: str) -> re.Pattern:
    """``re.compile(pattern)``, refusing (ValueError) a pattern that can backtrack exponentially."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    compiled = re.compile(pattern)
    reason = _explosive(_p.parse(pattern), inside_repeat=False)
    if reason:
        raise ValueError(f"{reason}: matching can take exponential time; rewrite it without a repeated "
                         "group that can match the same text in more than one way")
    return compiled


def _explosive(items, inside_repeat: bool) -> str:
    """Why the parsed pattern can blow up, or ''."""
    for op, arg in items:
        if op in _REPEATS and op is not None:
            lo, hi, body = arg
            repeats = hi > 1
            if inside_repeat and repeats:
                return "a repeated group contains another repetition"
            if repeats and _anchored_by_literal(body):
                continue
            found = _explosive(body, inside_repeat or repeats)
            if found:
                return found
        elif op is _c.BRANCH:
            if inside_repeat:
                return "a repeated group contains alternatives ('|')"
            for branch in arg[1]:
                found = _explosive(branch, inside_repeat)
                if found:
                    return found
        elif op is _c.SUBPATTERN:
            found = _explosive(arg[-1], inside_repeat)
            if found:
                return found
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            found = _explosive(arg[1], inside_repeat)
            if found:
                return found
        elif op is _c.GROUPREF and inside_repeat:
            return "a repeated group contains a back-reference"
    return ""


def _anchored_by_literal(body) -> bool:
    """Does every pass of ``body`` start with a literal character that no repetition, alternative or
    back-reference inside it can match? Then passes can't overlap: one way to match."""
    items = list(body)
    while items and items[0][0] is _c.SUBPATTERN:  # (?:\.x)* parses as a group around the items
        items = list(items[0][1][-1]) + items[1:]
    if not items or items[0][0] is not _c.LITERAL:
        return False
    first = chr(items[0][1])
    return all(_excludes(first, op, arg) for op, arg in items[1:])


def _excludes(ch: str, op, arg) -> bool:
    """True when the item (op, arg) is simple and can never match ``ch`` in any repetition."""
    if op is _c.LITERAL:
        return True  # a fixed character, not repeated: it can't shift where a pass starts
    if op in _REPEATS and op is not None:
        return all(_single_excludes(ch, o, a) for o, a in arg[2])
    return False


def _single_excludes(ch: str, op, arg) -> bool:
    if op is _c.LITERAL:
        return chr(arg) != ch
    if op is _c.IN:
        return not _in_set(ch, arg)
    return False


def _in_set(ch: str, items) -> bool:
    negate = bool(items) and items[0][0] is _c.NEGATE
    hit = False
    for op, arg in items[1:] if negate else items:
        if op is _c.LITERAL:
            hit |= chr(arg) == ch
        elif op is _c.RANGE:
            hit |= arg[0] <= ord(ch) <= arg[1]
        elif op is _c.CATEGORY:
            hit |= _CATEGORIES.get(arg, lambda c: True)(ch)
        else:
            return True  # unknown: assume it matches
    return hit != negate


_CATEGORIES = {
    _c.CATEGORY_DIGIT: str.isdigit, _c.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    _c.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    _c.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
    _c.CATEGORY_SPACE: str.isspace, _c.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
}

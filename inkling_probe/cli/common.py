"""Helpers shared by the CLI commands: one-line input errors, dump opening, output."""
from __future__ import annotations

import json
import math
import os
import sys

import click


class BadInput(click.ClickException):
    """Bad usage or input: printed as one line, exit code 2."""

    exit_code = 2


def open_dump(path: str):
    """Open a dump, turning any store error into a one-line :class:`BadInput`."""
    import inkling_probe
    from inkling_probe.errors import ProbeError

    try:
        return inkling_probe.open(path)
    except ProbeError as e:
        raise BadInput(str(e)) from None


def console():
    """A rich console on stdout, as wide as ``COLUMNS`` says (else the terminal; 160 when not a
    terminal): the tables, verdicts and explain lines all fit one width. rich itself honours
    NO_COLOR and plain (non-tty) output."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=output_width())


def output_width() -> int:
    """``COLUMNS`` when it is a positive number, else the terminal's width, else 160."""
    text = os.environ.get("COLUMNS", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 160
    except (OSError, ValueError):
        return 160


def emit_json(obj) -> None:
    """Print ``obj`` as JSON; NaN and Inf (which JSON lacks) become null."""
    click.echo(json.dumps(_sanitize(obj), indent=2, default=_json_default, allow_nan=False))


def _sanitize(obj):
    if isinstance(obj, float):
        return finite_or_none(obj)
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    return obj


def _json_default(v):
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, (set, tuple)):
        return list(v)
    raise TypeError(f"not JSON-serialisable: {type(v).__name__}")


def finite_or_none(x):
    """JSON has no NaN/Inf: map them to None."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def key_filter(patterns):
    """A predicate: does a key match any of the globs (all keys with none)?"""
    from inkling_probe.settings import glob_patterns, matches_any

    pats = glob_patterns(patterns)
    return lambda key: not pats or matches_any(key, pats)


# -- numeric options, checked before any work (one line, exit 2) ----------------------------------
class Number(click.ParamType):
    """A finite number within ``[min, max]`` (``min_open``: ``> min``); ``integer``: a whole number.

    Every numeric option of the commands takes one of these (:func:`Real`, :func:`Whole`), so ``nan``,
    ``inf`` or an out-of-range value stops the command at parse time, before it reads or runs
    anything, with one line naming the option and the value (:class:`BadInput`, exit 2). click's own
    FloatRange lets NaN through (every comparison with NaN is false) and reports a usage block.
    """

    def __init__(self, min=None, max=None, integer: bool = False, min_open: bool = False):
        self.min, self.max, self.integer, self.min_open = min, max, integer, min_open
        self.name = "integer" if integer else "float"

    def convert(self, value, param, ctx):
        x = self._parse(value, param)
        low = self.min is not None and (x <= self.min if self.min_open else x < self.min)
        if low or (self.max is not None and x > self.max):
            raise BadInput(f"{_option(param)} {value}: must be {self._range()}")
        return x

    def _parse(self, value, param):
        if isinstance(value, bool):
            raise BadInput(f"{_option(param)} {value}: expected a number")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            x = value
        else:
            text = str(value).strip()
            try:
                x = int(text) if self.integer else float(text)
            except ValueError:
                raise BadInput(f"{_option(param)} {value}: expected {'an integer' if self.integer else 'a number'}") \
                    from None
        if isinstance(x, float) and not math.isfinite(x):
            raise BadInput(f"{_option(param)} {value}: must be a finite number")
        if self.integer and x != int(x):
            raise BadInput(f"{_option(param)} {value}: expected an integer")
        return int(x) if self.integer else float(x)

    def _range(self) -> str:
        lo = None if self.min is None else f"{'>' if self.min_open else '>='} {self.min}"
        hi = None if self.max is None else f"<= {self.max}"
        return " and ".join(p for p in (lo, hi) if p) or "a finite number"

    def get_metavar(self, param, ctx=None):
        return self.name.upper()


def Real(min=None, max=None, min_open: bool = False) -> Number:  # noqa: N802 - reads like a type
    """A finite float option in ``[min, max]`` (``min_open``: strictly above ``min``)."""
    return Number(min, max, min_open=min_open)


def Whole(min=None, max=None) -> Number:  # noqa: N802 - reads like a type
    """An integer option in ``[min, max]``."""
    return Number(min, max, integer=True)


def _option(param) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name]
    return max(opts, key=len) if opts[0].startswith("-") else param.human_readable_name


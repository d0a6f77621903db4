"""Helpers shared by the CLI commands: one-line input errors, dump opening, output."""
from __future__ import annotations

import math

import click

from inkling_probe.views.format import output_width, to_json


class BadInput(click.ClickException):
    """Bad usage or input: printed as one line, exit code 2."""

    exit_code = 2


def removed_option(flag: str, instead: str, is_flag: bool = False):
    """A hidden option removed in 0.2.0: giving it is bad input, one line naming ``instead``."""
    from inkling_probe.removed import gone

    def refuse(ctx, param, value):
        if value:
            raise BadInput(str(gone(flag, instead)))

    own_name = "removed" + flag.replace("-", "_")  # never the name of the option that replaced it
    return click.option(flag, own_name, is_flag=is_flag, hidden=True, expose_value=False, callback=refuse,
                        help=f"Removed in 0.2.0: {instead}.")


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


def emit_json(obj) -> None:
    """Print ``obj`` as JSON; NaN and Inf (which JSON lacks) become null."""
    click.echo(to_json(obj, indent=2))


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



def finish_diff(compute, as_json: bool, header) -> None:
    """graphdiff's and compilediff's ending: ``compute()`` the verdict (a ProbeError is one line, exit
    2), print it (``--json``: its ``to_dict()``; else ``header(result)`` and its summary) and exit 1
    when it diverged."""
    from inkling_probe.errors import ProbeError

    try:
        result = compute()
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(f"{header(result)}\n{result.summary()}")
    if result.diverged:
        raise SystemExit(1)

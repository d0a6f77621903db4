"""Helpers shared by the CLI commands: one-line input errors, dump opening, output."""
from __future__ import annotations

import json
import math
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
    """A rich console on stdout; rich itself honours NO_COLOR and plain (non-tty) output."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


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

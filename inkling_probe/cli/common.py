"""Helpers shared by the CLI commands: one-line input errors, dump opening, output."""
from __future__ import annotations

import sys

import click

from inkling_probe.views.format import to_json


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
    click.echo(to_json(obj, indent=2))


def key_filter(patterns):
    """A predicate: does a key match any of the globs (all keys with none)?"""
    from inkling_probe.settings import glob_patterns, matches_any

    pats = glob_patterns(patterns)
    return lambda key: not pats or matches_any(key, pats)

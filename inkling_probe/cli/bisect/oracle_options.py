"""--oracle and the compare options it takes (flags, precision)."""
from __future__ import annotations

import functools

import click

from inkling_probe.cli.common import BadInput


def oracle_options(f):
    """--oracle exit|compare:REF, --control, --threshold, --map, --include."""
    opts = [
        click.option("--oracle", default="exit", show_default=True, metavar="exit|compare:REF",
                     help="exit: exit code 0 passes. compare:REF: the run's dump ({dump} or INKLING_PROBE) "
                          "compared with the dump REF; within tolerance passes."),
        click.option("--control", type=click.Path(), default=None, help="Control dump for the compare oracle."),
        click.option("--threshold", type=float, default=None, help="Compare threshold (default: dtype-aware)."),
        click.option("--map", "name_map", default=None, help="Name map for the compare (e.g. hf_inkling)."),
        click.option("--include", default=None, metavar="GLOBS", help="Compare only these keys."),
    ]
    return functools.reduce(lambda g, o: o(g), reversed(opts), f)


def compare_options(threshold, name_map, include) -> dict:
    """The compare() keyword arguments that were given."""
    opts = {"threshold": threshold, "name_map": name_map,
            "include": [g.strip() for g in include.split(",")] if include else None}
    return {k: v for k, v in opts.items() if v is not None}


def make_oracle(spec: str, control, threshold, name_map, include):
    from inkling_probe.bisect import oracle

    try:
        return oracle.parse(spec, control, **compare_options(threshold, name_map, include))
    except oracle.BadOracle as e:
        raise BadInput(str(e)) from None

"""--oracle and the compare options it takes (flags, precision); the compare options of layers.

Every option is checked before any command runs: ``--threshold`` finite and >= 0, ``--map`` a name
map that loads. ``--control`` means a command in ``bisect layers`` (like ``--ref`` and ``--cand``);
here the control is a dump, ``--control-dump`` (``--control``, its old spelling, was removed in 0.2.0).
"""
from __future__ import annotations

import functools

import click

from inkling_probe.cli.bisect.common import finite
from inkling_probe.cli.common import BadInput, removed_option

THRESHOLD_HELP = "Compare threshold, a finite number >= 0 (default: dtype-aware, or the control's floor)."


def oracle_options(f):
    """--oracle exit|compare:REF, --control-dump, --threshold, --map, --include."""
    opts = [
        click.option("--oracle", default="exit", show_default=True, metavar="exit|compare:REF",
                     help="exit: exit code 0 passes, 125 could not check (inconclusive), any other fails. "
                          "compare:REF: the run's dump ({dump} or INKLING_PROBE) compared with the dump REF: "
                          "within tolerance (every row checked) passes, a divergence fails, rows compare "
                          "could not check make it inconclusive."),
        click.option("--control-dump", "control", type=click.Path(), default=None,
                     help="Control dump for the compare oracle (sets the noise floor)."),
        removed_option("--control", "--control-dump DUMP in bisect flags|precision"),
        click.option("--threshold", type=float, default=None, callback=finite(0), help=THRESHOLD_HELP),
        click.option("--map", "name_map", default=None, help="Name map for the compare (e.g. hf_inkling)."),
        click.option("--include", default=None, metavar="GLOBS", help="Compare only these keys."),
    ]
    return functools.reduce(lambda g, o: o(g), reversed(opts), f)


def check_map(name_map) -> None:
    """A --map that does not load is bad input before any run (not a divergence found later)."""
    if name_map is None:
        return
    from inkling_probe.errors import ProbeError
    from inkling_probe.store.namemap import NameMap

    try:
        NameMap.load(name_map)
    except (ProbeError, OSError, ValueError) as e:
        raise BadInput(f"--map: {e}") from None


def compare_options(threshold, name_map, include) -> dict:
    """The compare() keyword arguments that were given (the map checked: it loads)."""
    check_map(name_map)
    opts = {"threshold": threshold, "name_map": name_map,
            "include": [g.strip() for g in include.split(",")] if include else None}
    return {k: v for k, v in opts.items() if v is not None}


def make_oracle(spec: str, control, threshold, name_map, include):
    from inkling_probe.bisect import oracle

    try:
        return oracle.parse(spec, control, **compare_options(threshold, name_map, include))
    except oracle.BadOracle as e:
        raise BadInput(str(e)) from None

"""``inkling-probe bisect``: hunts that re-run commands (layers, flags, precision, compiler) or split tensors
(elements).

One module per sub-command; each loads only when it runs, so ``--help`` stays instant.
"""
from __future__ import annotations

import importlib

import click

SUBCOMMANDS = {
    "layers": "inkling_probe.cli.bisect.layers:command",
    "flags": "inkling_probe.cli.bisect.flags:command",
    "elements": "inkling_probe.cli.bisect.elements:command",
    "precision": "inkling_probe.cli.bisect.precision:command",
    "compiler": "inkling_probe.cli.bisect.compiler:command",
}


class _Lazy(click.Group):
    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        spec = SUBCOMMANDS.get(name)
        if spec is None:
            return None
        module, _, attr = spec.partition(":")
        return getattr(importlib.import_module(module), attr)


@click.group("bisect", cls=_Lazy)
def command():
    """Find where, or under which settings, a candidate leaves the reference.

    \b
    Every bisect keeps its runs in --workdir (state.json, good/, bad/, inconclusive/) and resumes when
    run again with the same arguments (a state file that fails its checks is refused). A run the
    oracle could not check (compare left rows unchecked, or the command exited 125) is inconclusive:
    never counted as failing or passing. Exit codes: 0 finished, 1 a divergence was found (layers,
    elements), 2 bad input (checked before any run), 3 the oracle could not judge a run (the reason is
    printed; never a verdict), 4 the --max-runs budget was spent (run again with a larger one), 5 no
    answer: it depends on inconclusive runs (each named with its reason).
    """

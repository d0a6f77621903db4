"""``inkling-probe compilediff``: the first probe point where a compiled run departs from eager.

Exit status: 0 within what the dtype allows, 1 a divergence was found, 2 bad input, including a
compiled side that ran eager (graph breaks; inkling_probe/compiled/diff.py).
"""
from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, Real, finish_diff


@click.command("compilediff")
@click.argument("eager", type=click.Path())
@click.argument("compiled", type=click.Path())
@click.option("--control", type=click.Path(), default=None,
              help="A control dump for the noise floor (e.g. EAGER in the compiled run's dtype when EAGER is fp32).")
@click.option("--threshold", type=Real(min=0), default=None,
              help="rel_rms allowed per tensor (default: compare's floors, dtype-aware without a control).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(eager, compiled, control, threshold, as_json):
    """Judge dump COMPILED (recorded under torch.compile) against dump EAGER of the same inputs.

    Checks first that every tensor of COMPILED was recorded in the compiled graph with no graph break
    (its compile.json) and that EAGER was not compiled: otherwise one line, exit 2. Names the first
    probe point (execution order) where the compiled run departs beyond what its dtype allows.
    """
    from pathlib import Path

    from inkling_probe.compiled.diff import compiled_vs_eager

    for d in (eager, compiled, control):
        if d is not None and not Path(d).exists():
            raise BadInput(f"{d}: no such dump")
    finish_diff(lambda: compiled_vs_eager(eager, compiled, control=control, threshold=threshold), as_json,
                lambda r: f"eager: {r.eager}\ncompiled: {r.compiled}")

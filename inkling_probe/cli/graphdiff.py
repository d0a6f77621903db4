"""``inkling-probe graphdiff``: the first probe point where graph replays differ from eager.

Exit status: 0 replay equals eager (within --threshold), 1 a divergence was found, 2 bad input,
including a pair whose graph side replayed no graph or whose eager side replayed one (the steps'
``forward`` meta; inkling_probe/graphs/forward.py).
"""
from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, Real, Whole, finish_diff


@click.command("graphdiff")
@click.argument("dumps", nargs=-1, type=click.Path())
@click.option("--run", "command", metavar="CMD",
              help="Record both sides first: CMD runs twice, with INKLING_ENFORCE_EAGER=1 (eager) and =0 "
                   "(graphs); '{dump}' in CMD is replaced by each side's dump directory (under --out).")
@click.option("--out", type=click.Path(),
              help="With --run: directory for the two dumps (eager/, graph/); must not exist.")
@click.option("--eager-env", default="INKLING_ENFORCE_EAGER", show_default=True,
              help="With --run: the 0/1 variable that makes the command decode eagerly.")
@click.option("--timeout", type=Real(min=0, min_open=True), default=None,
              help="With --run: seconds before a side's run is killed, with every process it started "
                   "(one line, exit 2). Default: no limit.")
@click.option("--threshold", type=Real(min=0), default=0.0, show_default=True,
              help="rel_rms allowed per tensor (0: replay must be bit-identical to eager).")
@click.option("--step", "steps", type=Whole(min=0), multiple=True, help="Only this step; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(dumps, command, out, eager_env, timeout, threshold, steps, as_json):
    """Compare graph-replay dump GRAPH against eager dump EAGER of the same decode steps.

    Usage: `graphdiff EAGER GRAPH`, or `graphdiff --run CMD --out DIR` to record both first (each run a
    process group of its own, as bisect's: killed whole past --timeout or on Ctrl-C). Names the
    first probe point (in execution order) and step where the replay differs from eager. Checks first
    that GRAPH replayed a CUDA graph and EAGER did not (each step's recorded `forward`: eager,
    static-eager, graph): otherwise one line, exit 2.
    """
    from pathlib import Path

    from inkling_probe.graphs.diff import graph_vs_eager, record_pair

    if command is not None:
        if dumps or not out:
            raise BadInput("--run takes no EAGER/GRAPH arguments and needs --out DIR")
        if Path(out).exists():
            raise BadInput(f"--out {out}: already exists; choose a new directory")
        try:
            dumps = record_pair(command, out, eager_env, timeout=timeout)
        except (ValueError, RuntimeError) as e:
            raise BadInput(f"--run: {e}") from None
    elif len(dumps) != 2:
        raise BadInput("pass EAGER and GRAPH dumps, or --run CMD --out DIR")
    for d in dumps:
        if not Path(d).exists():
            raise BadInput(f"{d}: no such dump")
    finish_diff(lambda: graph_vs_eager(dumps[0], dumps[1], threshold=threshold, steps=set(steps) or None),
                as_json, lambda r: f"eager: {r.eager}\ngraph: {r.graph}")

"""``inkling-probe bisect layers``: the first divergent layer, recording one layer per run."""
from __future__ import annotations

import click

from inkling_probe.cli.bisect.common import (commands, exit_for, finish, finite, guarded, render_inconclusive,
                                             run_options, session)
from inkling_probe.cli.bisect.oracle_options import THRESHOLD_HELP, compare_options


def _render(answer: dict) -> None:
    if answer["inconclusive"]:
        render_inconclusive(answer, "first divergent layer")
        known = [f"passes through {answer['passes_through']}" if answer["passes_through"] else "",
                 f"fails at {answer['fails_at']}" if answer["fails_at"] else ""]
        if any(known):
            click.echo("  known: " + ", ".join(k for k in known if k))
    elif not answer["diverged"]:
        click.echo(f"no divergence in {answer['layers']} layers")
    else:
        click.echo(f"first divergent layer: {answer['layer']}")
        if answer["first_divergence"]:
            click.echo(f"  first divergence {answer['first_divergence']}, culprit {answer['culprit']}")
        for row in answer.get("unchecked", [])[:5]:
            click.echo(f"  could not check {row}")
    for t in answer["set_aside"]:
        click.echo(f"  set aside {t['trial']} (inconclusive, outside the answer's bounds): {t['why']}")
    if answer["nonfinite_onset"]:
        click.echo(f"  the candidate's stats turn non-finite at {answer['nonfinite_onset']}")
    click.echo(f"{answer['runs_per_side']} runs per side for {answer['layers']} layers "
               f"(bound ceil(log2 L) + 2 = {answer['bound']})")


@click.command("layers")
@click.option("--ref", required=True, help="Reference command ({dump} for its dump, else INKLING_PROBE is set).")
@click.option("--cand", required=True, help="Candidate command.")
@click.option("--control", default=None,
              help="Control command: a second reference differing in a benign factor (sets the noise floor). "
                   "A command, like --ref and --cand (bisect flags|precision take a dump: --control-dump).")
@click.option("--threshold", type=float, default=None, callback=finite(0), help=THRESHOLD_HELP)
@click.option("--map", "name_map", default=None, help="Name map for the compare (e.g. hf_inkling).")
@run_options
def command(ref, cand, control, threshold, name_map, workdir, shell, timeout, on_crash, max_runs, as_json):
    """Binary search over the probe order: each run records one layer on every side and compares it."""
    cmds = commands(shell, ref=ref, cand=cand, control=control)
    options = compare_options(threshold, name_map, None)
    args = dict(ref=ref, cand=cand, control=control, shell=shell, threshold=threshold, map=name_map,
                on_crash=on_crash)
    state, runner, status = session("layers", workdir, args, max_runs, timeout, as_json)
    from inkling_probe.bisect.layers import LayerSearch

    search = LayerSearch(runner, cmds, options, on_crash)
    with status:
        answer = guarded(search.run)
    finish(state, answer, as_json, _render)
    exit_for(answer)
    if answer["diverged"]:
        raise SystemExit(1)

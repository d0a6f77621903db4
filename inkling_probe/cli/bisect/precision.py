"""``inkling-probe bisect precision``: the fewest layers that must stay at reference precision."""
from __future__ import annotations

import click

from inkling_probe.cli.bisect.common import (commands, exit_for, finish, guarded, render_inconclusive, run_options,
                                             session)
from inkling_probe.cli.bisect.oracle_options import make_oracle, oracle_options
from inkling_probe.cli.common import BadInput


def _render(answer: dict) -> None:
    if answer["inconclusive"]:
        render_inconclusive(answer, "minimal layer set")
        seen = answer["smallest_passing"]
        if seen is not None:
            click.echo(f"  smallest set seen passing (not shown minimal): {answer['variable']}="
                       f"{','.join(map(str, seen))}")
        click.echo(f"{answer['tests']} distinct layer sets tested")
        return
    keep = ",".join(map(str, answer["reference_layers"])) or "none"
    click.echo(f"layers that must stay at reference precision: {keep}")
    click.echo(f"layers that may stay quantized: {','.join(map(str, answer['quantized_layers'])) or 'none'}")
    click.echo(f"pass it on: {answer['variable']}={','.join(map(str, answer['reference_layers']))}  "
               f"({answer['tests']} distinct layer sets tested)")


def _check_layers(layers, orc, spec) -> None:
    """Layers the compare oracle's reference dump does not have are bad input, before any run."""
    import re

    from inkling_probe.bisect.precision import BadLayers, check_against
    from inkling_probe.store.reader import open_dump

    ref = getattr(orc, "ref", None)
    if ref is None:
        return  # the exit oracle: no dump shows the model's layers (docs/BISECT.md)
    pattern = re.compile(r"(?:^|\.)layers\.(\d+)\.")
    with open_dump(ref) as d:
        present = sorted({int(m.group(1)) for k in d.keys() if (m := pattern.search(k))})
    try:
        check_against(layers, present, f"the reference dump {ref}", f"--layers {spec}")
    except BadLayers as e:
        raise BadInput(str(e)) from None


@click.command("precision")
@click.option("--cmd", "cmd", required=True, help="The command to run ({dump} for its dump).")
@click.option("--layers", "spec", required=True, metavar="SPEC", help="Candidate layers: 3-5, 3,5,7, 2-4,9.")
@click.option("--var", default="INKLING_BF16_LAYERS", show_default=True,
              help="The variable the command reads the reference-precision layers from (comma-separated ids).")
@oracle_options
@run_options
def command(cmd, spec, var, oracle, control, threshold, name_map, include,
            workdir, shell, timeout, on_crash, max_runs, as_json):
    """ddmin over layers: the smallest set kept at reference precision for which the oracle passes."""
    from inkling_probe.bisect.precision import BadLayers, bisect_precision, parse_layers

    try:
        layers = parse_layers(spec)
    except BadLayers as e:
        raise BadInput(str(e)) from None
    cmds = commands(shell, cmd=cmd)
    orc = make_oracle(oracle, control, threshold, name_map, include)
    _check_layers(layers, orc, spec)
    args = dict(cmd=cmd, shell=shell, layers=layers, var=var, oracle=orc.spec, control=control,
                threshold=threshold, map=name_map, include=include, on_crash=on_crash)
    state, runner, status = session("precision", workdir, args, max_runs, timeout, as_json)
    with status:
        answer = guarded(lambda: bisect_precision(runner, orc, cmds["cmd"], layers, var, on_crash))
    finish(state, answer, as_json, _render)
    exit_for(answer)

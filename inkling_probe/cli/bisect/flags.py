"""``inkling-probe bisect flags``: the minimal set of toggles behind a failure (ddmin)."""
from __future__ import annotations

import click

from inkling_probe.cli.bisect.common import (commands, exit_for, finish, guarded, render_inconclusive, run_options,
                                             session)
from inkling_probe.cli.bisect.oracle_options import make_oracle, oracle_options
from inkling_probe.cli.common import BadInput


def _toggles(flag, model, select):
    from inkling_probe.bisect.toggles import check_distinct, model_toggles, parse_flag
    from inkling_probe.errors import ProbeError

    try:
        found = (model_toggles(model, select) if model else []) + [parse_flag(f) for f in flag]
        check_distinct(found)
    except ProbeError as e:
        raise BadInput(str(e)) from None
    return found


def _list(toggles) -> None:
    from rich.table import Table

    from inkling_probe.cli.common import console

    t = Table("name", "variable", "good", "bad", "needs", "what", box=None)
    for x in toggles:
        t.add_row(x.name, x.env, str(x.good) if x.good is not None else "(unset)",
                  str(x.bad) if x.bad is not None else "(unset)", x.needs or "", x.doc)
    console().print(t)


def _render(answer: dict) -> None:
    if answer["inconclusive"]:
        render_inconclusive(answer, "minimal failing set")
        if answer["smallest_failing"]:
            click.echo(f"  smallest set seen failing (not shown minimal): {', '.join(answer['smallest_failing'])}")
        click.echo(f"{answer['tests']} distinct configurations tested")
        return
    names = ", ".join(answer["failing_set"])
    click.echo(f"minimal failing set ({len(answer['failing_set'])} of the flags): {names}")
    for name, value in answer["bad_env"].items():
        click.echo(f"  {name}={value if value is not None else '(unset)'}")
    click.echo(f"{answer['tests']} distinct configurations tested")


@click.command("flags")
@click.option("--cmd", "cmd", default=None, help="The command to run (env toggles applied; {dump} for its dump).")
@click.option("--flag", multiple=True, metavar="NAME=GOOD:BAD",
              help="A toggle: environment variable NAME, GOOD and BAD values (empty: unset). Repeatable.")
@click.option("--model", default=None, help="Add the toggles a model registers (inkling_probe.toggles), e.g. inkling_model.")
@click.option("--select", default=None, metavar="GLOBS", help="Only the model toggles whose names match.")
@click.option("--list", "list_only", is_flag=True, help="List the toggles and stop.")
@oracle_options
@run_options
def command(cmd, flag, model, select, list_only, oracle, control, threshold, name_map, include,
            workdir, shell, timeout, on_crash, max_runs, as_json):
    """Delta debugging over toggles: the smallest set that, at BAD, makes the oracle fail."""
    toggles = _toggles(flag, model, select)
    if list_only:
        return _list(toggles)
    if cmd is None:
        raise BadInput("--cmd is required (or --list)")
    cmds = commands(shell, cmd=cmd)
    orc = make_oracle(oracle, control, threshold, name_map, include)
    args = dict(cmd=cmd, shell=shell, toggles=[t.as_dict() for t in toggles], oracle=orc.spec, control=control,
                threshold=threshold, map=name_map, include=include, on_crash=on_crash)
    state, runner, status = session("flags", workdir, args, max_runs, timeout, as_json)
    from inkling_probe.bisect.flags import bisect_flags

    with status:
        answer = guarded(lambda: bisect_flags(runner, orc, cmds["cmd"], toggles, on_crash))
    finish(state, answer, as_json, _render)
    exit_for(answer)

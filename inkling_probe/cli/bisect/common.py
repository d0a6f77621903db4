"""Options, progress and output shared by the bisect sub-commands (the only place rich is used)."""
from __future__ import annotations

import functools

import click

from inkling_probe.cli.common import BadInput, emit_json

EXIT_BUDGET = 4
EXIT_INCONCLUSIVE = 5  # the answer depends on trials the oracle could not check: no answer given


class OracleExit(click.ClickException):
    """The oracle could not judge a run: one line with its reason, exit 3 (never a verdict)."""

    exit_code = 3


class BudgetExit(click.ClickException):
    """The --max-runs budget is spent: one line, exit 4, the state kept for a resume."""

    exit_code = EXIT_BUDGET


def finite(minimum: float = 0.0, open_min: bool = False):
    """A click callback: a finite number >= ``minimum`` (> with ``open_min``), else one line, exit 2.
    click's own ranges let NaN through (every comparison with NaN is false)."""
    import math

    def check(ctx, param, value):
        if value is None:
            return None
        ok = math.isfinite(value) and (value > minimum if open_min else value >= minimum)
        if not ok:
            raise BadInput(f"--{param.name.replace('_', '-')} {value}: must be a finite number "
                           f"{'>' if open_min else '>='} {minimum:g}")
        return value

    return check


def run_options(f):
    """--workdir, --shell, --timeout, --on-crash, --max-runs, --json."""
    opts = [
        click.option("-w", "--workdir", type=click.Path(file_okay=False), default=None,
                     help="Where the state file and every run's artifacts go (default: ./bisect-KIND). "
                          "Run again with the same arguments to resume."),
        click.option("--shell", is_flag=True, help="Run commands through /bin/sh (default: no shell, shlex-split)."),
        click.option("--timeout", type=float, default=None, callback=finite(0, open_min=True),
                     help="Seconds before a run is killed (counted as a crash)."),
        click.option("--on-crash", type=click.Choice(["fail", "pass", "stop"]), default="fail", show_default=True,
                     help="What a crashed run (signal, timeout, no start; compare oracles: a non-zero exit but 125) "
                          "counts as."),
        click.option("--max-runs", type=int, default=None, callback=finite(1),
                     help="Stop (exit 4, state kept) before starting more runs than this."),
        click.option("--json", "as_json", is_flag=True, help="Print the answer and every run as JSON."),
    ]
    return functools.reduce(lambda g, o: o(g), reversed(opts), f)


def printer(as_json: bool):
    """A progress callback that prints one line per run to stderr (rich; nothing with --json)."""
    if as_json:
        return None, _null_status()
    import sys

    from rich.console import Console
    from rich.markup import escape

    con = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)
    status = con.status("starting")

    def progress(event: str, info: dict) -> None:
        if event == "start":
            status.update(f"run {info['n']}: {info['label']}")
        elif event in ("done", "cached"):
            how = "from state" if event == "cached" else f"{info['seconds']:.1f} s"
            crash = f" [red]crashed: {info['why']}[/]" if info["crashed"] else ""
            con.print(f"  run {info['n']:>3}  {info['label']:<28} exit {info['exit_code']:<4} {how}{crash}")
        elif event == "verdict":
            word = "[green]pass[/]" if info["passed"] else "[red]FAIL[/]"
            extra = f"  first divergence {info['first_divergence']}" if info.get("first_divergence") else ""
            if not extra and info.get("unchecked"):
                extra = f"  could not check {info.get('n_unchecked', len(info['unchecked']))} row(s)"
            if info.get("inconclusive"):
                word, extra = "[yellow]INCONCLUSIVE[/]", f"  {escape(info.get('why') or 'could not check')}"
            con.print(f"  -> {escape(info['label'])}: {word}{extra}")

    return progress, status


class _null_status:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def session(kind: str, workdir, args: dict, max_runs, timeout, as_json):
    """(state, runner, status) for a bisect; a state with other arguments is bad input."""
    from inkling_probe.bisect.runner import Runner
    from inkling_probe.bisect.state import State, StateMismatch

    try:
        state = State(workdir or f"bisect-{kind}", kind, args)
    except StateMismatch as e:
        raise BadInput(str(e)) from None
    progress, status = printer(as_json)
    try:
        runner = Runner(state, max_runs=max_runs, timeout=timeout, progress=progress)
    except StateMismatch as e:
        raise BadInput(str(e)) from None
    return state, runner, status


def _terminate_as_exit() -> dict:
    """SIGTERM and SIGHUP end the bisect as an exception does: the run in progress is killed with its
    whole process group on the way out (Ctrl-C already does; the run's group is not the terminal's).
    Returns the handlers it replaced."""
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, stop)
        except ValueError:  # not the main thread (an embedding caller): leave its handlers alone
            pass
    return old


def guarded(search):
    """Run ``search()``; the toolkit's expected errors become one-line exits (2; 3 when the oracle could
    not judge a run; 4 for the budget). SIGTERM/SIGHUP end it as an exception does meanwhile."""
    import signal

    from inkling_probe.bisect.oracle import OracleError
    from inkling_probe.bisect.runner import BudgetSpent
    from inkling_probe.errors import ProbeError

    handlers = _terminate_as_exit()
    try:
        return search()
    except BudgetSpent as e:
        raise BudgetExit(str(e)) from None
    except OracleError as e:
        raise OracleExit(str(e)) from None
    except ProbeError as e:
        raise BadInput(str(e)) from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def finish(state, answer: dict, as_json: bool, render) -> None:
    """Keep the answer in the state file and print it (JSON with every run, or ``render``)."""
    from inkling_probe.bisect.trial import run_rows

    state.answer = answer
    state.save()
    runs = run_rows(state)
    if as_json:
        emit_json({"kind": state.kind, "workdir": str(state.workdir), "answer": answer, "runs": runs,
                   "runs_done": len(runs), "runs_resumed": state.resumed_runs})
        state.close()
        return
    render(answer)
    fresh = len(runs) - state.resumed_runs
    unsure = f" and {state.workdir}/inconclusive" if (state.workdir / "inconclusive").is_dir() else ""
    click.echo(f"{len(runs)} runs ({fresh} now, {state.resumed_runs} from the state file); "
               f"artifacts in {state.workdir}/good{',' if unsure else ' and'} {state.workdir}/bad{unsure}")
    state.close()


def render_inconclusive(answer: dict, what: str) -> None:
    """The trials an answer depends on that could not be checked, each with its reason (one line each)."""
    unsure = answer["inconclusive"]
    click.echo(f"no {what}: the answer depends on {len(unsure)} trial(s) the oracle could not check (inconclusive)")
    for t in unsure:
        click.echo(f"  inconclusive {t['trial']}: {t['why']}")


def exit_for(answer: dict) -> None:
    """Exit 5 when the answer depends on inconclusive trials (after :func:`finish` printed it)."""
    if answer.get("inconclusive"):
        raise SystemExit(EXIT_INCONCLUSIVE)


def commands(shell: bool, **texts) -> dict:
    """Checked :class:`Command` objects by name (None values skipped)."""
    from inkling_probe.bisect.runner import BadCommand, Command

    out = {}
    for what, text in texts.items():
        if text is None:
            continue
        c = Command(text, shell)
        try:
            c.check(f"--{what}")
        except BadCommand as e:
            raise BadInput(str(e)) from None
        out[what] = c
    return out

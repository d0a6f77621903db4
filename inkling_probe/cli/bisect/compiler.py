"""``inkling-probe bisect compiler``: which torch.compile stage, and which Inductor subsystem, makes a
compiled run leave its eager dump (PyTorch's CompilerBisector, compilediff as the oracle).

Each trial runs --cmd in a subprocess with ``{backend}`` and ``{dump}`` filled in and the bisector's
environment (inkling_probe/compiled/bisector.py: ``trial_env``); the dump is judged against --eager.
Exit 0 a stage was found, 2 bad input, 3 a trial's command failed (no verdict), 5 no stage diverges
(nothing to bisect: no answer).
"""
from __future__ import annotations

import click

from inkling_probe.cli.bisect.common import EXIT_INCONCLUSIVE, OracleExit, finite
from inkling_probe.cli.common import BadInput, emit_json

ARGS = "args.json"  # the workdir's bisect: another --cmd/--eager there is refused


def _check(cmd: str, eager: str, shell: bool, workdir) -> None:
    """Bad input (one line) before any trial: the placeholders, the program, the eager dump, the workdir."""
    import json
    from pathlib import Path

    from inkling_probe.cli.bisect.common import commands
    from inkling_probe.errors import ProbeError
    from inkling_probe.store.reader import as_dump

    for slot in ("{backend}", "{dump}"):
        if slot not in cmd:
            raise BadInput(f"--cmd must hold {slot} (the trial's torch.compile backend and its dump directory)")
    commands(shell, cmd=cmd)
    if not Path(eager).exists():
        raise BadInput(f"--eager {eager}: no such dump")
    try:
        as_dump(eager)
    except ProbeError as e:
        raise BadInput(f"--eager {eager}: {str(e).splitlines()[0]}") from None
    args = {"cmd": cmd, "eager": str(Path(eager).resolve()), "shell": shell}
    path = Path(workdir) / ARGS
    if path.exists() and json.loads(path.read_text()) != args:
        raise BadInput(f"{workdir} holds a compiler bisect with other arguments ({path}); pass another --workdir")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(args) + "\n")


def _recorder(cmd: str, shell: bool, workdir, timeout):
    """``record(backend, dump)``: the command in a subprocess with the bisector's environment; a non-zero
    exit or a timeout raises with the command's stderr (the bisector reads it)."""
    import os
    import subprocess

    from inkling_probe.bisect.runner import Command
    from inkling_probe.compiled.bisector import trial_env

    def record(backend: str, dump) -> None:
        args = Command(cmd.replace("{backend}", backend), shell).args(str(dump))
        env = {**os.environ, **trial_env(workdir)}
        try:
            done = subprocess.run(args, shell=shell, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"timed out after {timeout} s") from None
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")

    return record


@click.command("compiler")
@click.option("--cmd", "cmd", required=True,
              help="Records the compiled run: {backend} for torch.compile's backend, {dump} for its dump, e.g. "
                   "'inkling-probe run --ckpt C --tokens T --dtype bf16 --compile --compile-backend {backend} "
                   "--dump {dump}'.")
@click.option("--eager", required=True, type=click.Path(), help="The eager dump of the same run (the reference).")
@click.option("-w", "--workdir", type=click.Path(file_okay=False), default="bisect-compiler", show_default=True,
              help="The bisector's state and every trial's dump; run again with the same arguments to resume.")
@click.option("--shell", is_flag=True, help="Run --cmd through /bin/sh (default: no shell, shlex-split).")
@click.option("--timeout", type=float, default=None, callback=finite(0, open_min=True),
              help="Seconds before a trial is killed (a failed trial: exit 3).")
@click.option("--json", "as_json", is_flag=True, help="The answer as JSON (trial lines go to stderr).")
def command(cmd, eager, workdir, shell, timeout, as_json):
    """The torch.compile stage (eager, aot_eager, aot_eager_decomp_partition, inductor) and Inductor
    subsystem at which the compiled run first leaves EAGER, by PyTorch's CompilerBisector; one line per
    trial, resumable from --workdir."""
    from inkling_probe.compiled.bisector import TrialFailed, bisect_compiler

    _check(cmd, eager, shell, workdir)
    log = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    try:
        answer = bisect_compiler(_recorder(cmd, shell, workdir, timeout), eager, workdir, log=log)
    except TrialFailed as e:
        raise OracleExit(str(e)) from None
    if as_json:
        emit_json(answer)
    elif answer["backend"] is None:
        click.echo(f"no stage diverges: every trial read good ({answer['trials']} trials); nothing to bisect")
    else:
        sub = f", subsystem {answer['subsystem']}" if answer["subsystem"] else ", subsystem not identified"
        count = f", count {answer['count']}" if answer["count"] else ""
        skipped = f"; skipped (counted good): {', '.join(answer['skipped'])}" if answer["skipped"] else ""
        click.echo(f"answer: stage {answer['backend']}{sub}{count} ({answer['trials']} trials{skipped})")
    if answer["backend"] is None:
        raise SystemExit(EXIT_INCONCLUSIVE)

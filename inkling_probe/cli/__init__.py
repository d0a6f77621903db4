"""The ``inkling-probe`` command group.

Built-in commands live one per module in this package; other packages (such as inkling_model) add
commands through the ``inkling_probe.commands`` entry-point group. Modules load only when their
command runs (or ``--help`` lists them), and none imports torch or h5py at import time.
"""
from __future__ import annotations

import importlib
import os
import sys

import click

from inkling_probe.settings import VARIABLES, debug

BUILTIN = {
    "ls": "inkling_probe.cli.ls:command",
    "show": "inkling_probe.cli.show:command",
    "compare": "inkling_probe.cli.compare:command",
    "replay": "inkling_probe.cli.replay:command",
    "graphdiff": "inkling_probe.cli.graphdiff:command",
    "compilediff": "inkling_probe.cli.compilediff:command",
    "report": "inkling_probe.cli.report:command",
    "extract": "inkling_probe.cli.extract:command",
    "bisect": "inkling_probe.cli.bisect:command",
    "paired": "inkling_probe.cli.paired:command",
    "health": "inkling_probe.cli.health:command",
    "parity": "inkling_probe.cli.parity:command",
    "import": "inkling_probe.cli.import_:command",
}

def _load(spec: str) -> click.Command:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def _specs(self) -> dict[str, str]:
        from importlib.metadata import entry_points  # ~60 ms: only when a plug-in may be asked for

        from inkling_probe.plugins import COMMANDS

        specs = {name: spec for name, spec in BUILTIN.items() if _module_exists(spec)}
        for ep in entry_points(group=COMMANDS):
            specs.setdefault(ep.name, ep.value)
        return specs

    def list_commands(self, ctx):
        return sorted(set(self._specs()) | set(self.commands))

    def get_command(self, ctx, name):
        spec = BUILTIN[name] if name in BUILTIN and _module_exists(BUILTIN[name]) else self._specs().get(name)
        if spec is None:
            return self.commands.get(name)
        try:
            return _load(spec)
        except ImportError as e:  # keep --help working; say why when the command is used
            return _unavailable(name, f"command {name!r} could not load: {e}")


def _unavailable(name: str, why: str) -> click.Command:
    def fail(**_):
        from inkling_probe.cli.common import BadInput
        raise BadInput(why)
    return click.Command(name, callback=fail, help=f"(unavailable) {why}",
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


def _module_exists(spec: str) -> bool:
    return importlib.util.find_spec(spec.partition(":")[0]) is not None


def _env_help() -> str:
    rows = "\n".join(f"  {name}: {text}" for name, text in VARIABLES.items())
    return f"\b\nRecording is configured by environment variables only:\n{rows}"


@click.group(cls=LazyGroup, epilog=_env_help(), context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="inkling-probe")
def group():
    """inkling-probe: record, compare and localize numerical divergence in LLM inference engines."""


def main(argv=None) -> None:
    """Console entry point. Exit codes: 0 ok (or within tolerance), 1 divergence found, 2 bad usage
    or input (one line naming it: a damaged dump, a bad option value, a bad INKLING_PROBE_*
    variable, a path that can't be read or written), 3 an unexpected error (one line; the
    traceback with INKLING_PROBE_DEBUG=1), 125 ``compare`` found no divergence but could not check
    some rows (``bisect`` has its own 4 and 5: docs/BISECT.md), 141 output closed early (``| head``),
    130 Ctrl-C."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        _check_environment(args)
        code = group.main(args=args, prog_name="inkling-probe", standalone_mode=False)
        code = code if isinstance(code, int) else 0  # ctx.exit(n) returns n in this mode
    except BaseException as e:  # noqa: BLE001 - every way out is one line and an exit code
        code = _exit_code(e)
    if type(sys.stdout).__name__ == "_PacifyFlushWrapper":  # click met EPIPE and went quiet
        code = 141
    sys.exit(code if _flush_stdout() else 141)


def _check_environment(args: list[str]) -> None:
    """A bad INKLING_PROBE_* variable (found when the sink was imported) stops every command with
    one line; ``--help``, ``--version`` and no command still work, with a one-line warning."""
    from inkling_probe import sink

    error = sink.ENV_ERROR
    if error is None:
        return
    if not args or any(a in ("-h", "--help", "--version") for a in args):
        click.echo(f"Warning: {error}", err=True)
        return
    raise error


def _exit_code(e: BaseException) -> int:
    from inkling_probe.errors import ProbeError

    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if isinstance(e, click.exceptions.Exit):
        return e.exit_code
    if isinstance(e, BrokenPipeError):
        _silence_stdout()
        return 141
    if isinstance(e, click.ClickException):
        e.show()
        return e.exit_code
    if isinstance(e, (click.Abort, KeyboardInterrupt)):
        click.echo("Aborted.", err=True)
        return 130
    if isinstance(e, ProbeError):
        click.echo(f"Error: {e}", err=True)
        return 2
    if isinstance(e, OSError) and e.filename is not None:  # a path given that can't be used
        click.echo(f"Error: {e.filename}: {e.strerror or e}", err=True)
        return 2
    if debug():
        raise e
    first = str(e).splitlines()[0] if str(e) else ""
    click.echo(f"Error: {type(e).__name__}: {first} (INKLING_PROBE_DEBUG=1 for the traceback)", err=True)
    return 3


def _flush_stdout() -> bool:
    """Flush what is buffered; False when the reader has gone."""
    try:
        sys.stdout.flush()
        return True
    except BrokenPipeError:
        _silence_stdout()
        return False


def _silence_stdout() -> None:
    """The reader of our output has gone (``| head``): drop what is left instead of a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass

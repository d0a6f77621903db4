"""The ``inkling-probe`` command group.

Built-in commands live one per module in this package; other packages (such as inkling_model) add
commands through the ``inkling_probe.commands`` entry-point group. Modules load only when their
command runs (or ``--help`` lists them), and none imports torch or h5py at import time.
"""
from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points

import click

from inkling_probe.settings import VARIABLES

BUILTIN = {
    "ls": "inkling_probe.cli.ls:command",
    "show": "inkling_probe.cli.show:command",
    "compare": "inkling_probe.cli.compare:command",
    "replay": "inkling_probe.cli.replay:command",
    "graphdiff": "inkling_probe.cli.graphdiff:command",
    "report": "inkling_probe.cli.report:command",
    "extract": "inkling_probe.cli.extract:command",
    "bisect": "inkling_probe.cli.bisect:command",
    "paired": "inkling_probe.cli.paired:command",
    "health": "inkling_probe.cli.health:command",
    "parity": "inkling_probe.cli.parity:command",
}
ENTRY_POINT_GROUP = "inkling_probe.commands"


def _load(spec: str) -> click.Command:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def _specs(self) -> dict[str, str]:
        specs = {name: spec for name, spec in BUILTIN.items() if _module_exists(spec)}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            specs.setdefault(ep.name, ep.value)
        return specs

    def list_commands(self, ctx):
        return sorted(set(self._specs()) | set(self.commands))

    def get_command(self, ctx, name):
        spec = self._specs().get(name)
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
    or input (one line naming it), 3 an unexpected error (one line; the traceback with
    INKLING_PROBE_DEBUG=1)."""
    from inkling_probe.errors import ProbeError

    try:
        code = group.main(args=argv, prog_name="inkling-probe", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)  # ctx.exit(n) returns n in this mode
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except ProbeError as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(2)
    except Exception as e:  # an unexpected failure: a short message, the traceback on request
        if os.environ.get("INKLING_PROBE_DEBUG") == "1":
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        click.echo(f"Error: {type(e).__name__}: {first} (INKLING_PROBE_DEBUG=1 for the traceback)", err=True)
        sys.exit(3)

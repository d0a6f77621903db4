"""Test helper: run the CLI in-process and check a bad input's answer (one line, exit 2)."""
from click.testing import CliRunner

from inkling_probe.cli import group


def run(*args):
    return CliRunner().invoke(group, [str(a) for a in args])


def one_line_error(result, *names):
    """The one ``Error: ...`` line of an exit-2 answer, holding every one of ``names``; no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]

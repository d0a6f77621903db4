"""The console entry point's exit codes: ctx.exit(n) is honoured, errors are one line."""
import click
import pytest

from inkling_probe.cli import LazyGroup, main


def test_ctx_exit_code_and_plain_return(monkeypatch):
    g = LazyGroup()

    @g.command("diverges")
    @click.pass_context
    def diverges(ctx):
        ctx.exit(1)

    @g.command("fine")
    def fine():
        return "a value, not an exit code"

    @g.command("broken")
    def broken():
        raise ZeroDivisionError("boom\nsecond line")

    monkeypatch.setattr("inkling_probe.cli.group", g)
    for name, code in (("diverges", 1), ("fine", 0), ("broken", 3)):
        with pytest.raises(SystemExit) as e:
            main([name])
        assert e.value.code == code, name


def test_unexpected_error_is_one_line(monkeypatch, capsys):
    g = LazyGroup()

    @g.command("broken")
    def broken():
        raise ZeroDivisionError("boom\nsecond line")

    monkeypatch.setattr("inkling_probe.cli.group", g)
    monkeypatch.delenv("INKLING_PROBE_DEBUG", raising=False)
    with pytest.raises(SystemExit):
        main(["broken"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["Error: ZeroDivisionError: boom (INKLING_PROBE_DEBUG=1 for the traceback)"]

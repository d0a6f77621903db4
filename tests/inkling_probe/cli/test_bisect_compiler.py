"""``bisect compiler``: a trial per line, the stage found (exit 0), a second run answers from its
workdir, a trial whose command fails is exit 3, and bad input is one line, exit 2 before any trial.

Each trial is a subprocess (compiled_prog.py); the compiled-branch fault is found at the first stage.
The Inductor bisect of a planted fault: tests/inkling_probe/compiled/test_bisector.py (slow).
"""
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from inkling_probe.cli import group

PROG = Path(__file__).with_name("compiled_prog.py")


def _cmd(fault=""):
    return f"{sys.executable} {PROG} {{backend}} {{dump}} {fault}".strip()


def _bisect(*args):
    return CliRunner().invoke(group, ["bisect", "compiler", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("compiled_prog", PROG)
    mod = module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = tmp_path_factory.mktemp("e") / "eager"
    mod.main("none", str(path))
    return path


def test_branch_fault_found_at_the_eager_stage_and_resumed(eager, tmp_path):
    out = _bisect("--cmd", _cmd("branch"), "--eager", eager, "-w", tmp_path / "w")
    assert out.exit_code == 0, out.output + out.stderr
    assert out.stdout.splitlines() == [
        "trial 1: backend=eager subsystem=-: bad, first divergent point p.h (rel_rms 0.5)",
        "answer: stage eager, subsystem not identified (1 trials)"]
    again = _bisect("--cmd", _cmd("branch"), "--eager", eager, "-w", tmp_path / "w")
    assert again.exit_code == 0 and again.stdout == out.stdout
    assert not (tmp_path / "w" / "trial-2").exists()  # answered from the workdir, no trial run


def test_a_failing_trial_is_exit_3(eager, tmp_path):
    out = _bisect("--cmd", f"{sys.executable} -c 'import sys; sys.exit(\"boom {{backend}} {{dump}}\")'",
                  "--eager", eager, "-w", tmp_path / "w")
    assert out.exit_code == 3, out.output
    assert "trial 1: backend=eager subsystem=-: the record failed" in out.stderr and "boom eager" in out.stderr


@pytest.mark.parametrize("args,text", [
    (["--cmd", "true {dump}"], "--cmd must hold {backend}"),
    (["--cmd", "no-such-program-xyz {backend} {dump}"], "program 'no-such-program-xyz' not found"),
    (["--cmd", "true {backend} {dump}", "--eager", "/no/such/dump"], "--eager /no/such/dump: no such dump"),
    (["--cmd", "true {backend} {dump}", "--timeout", "0"], "--timeout 0.0: must be a finite number > 0"),
])
def test_bad_input_one_line_exit_2(args, text, eager, tmp_path):
    if "--eager" not in args:
        args = args + ["--eager", str(eager)]
    out = _bisect(*args, "-w", tmp_path / "w")
    assert out.exit_code == 2, out.output
    assert text in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "w").exists()


def test_a_workdir_of_another_bisect_is_refused(eager, tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "args.json").write_text('{"cmd": "x", "eager": "y", "shell": false}\n')
    out = _bisect("--cmd", _cmd(), "--eager", eager, "-w", tmp_path / "w")
    assert out.exit_code == 2 and "holds a compiler bisect with other arguments" in out.stderr

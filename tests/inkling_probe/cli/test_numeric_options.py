"""Every numeric option of the non-bisect commands is checked when the command line is parsed: a
non-finite or out-of-range value is one line naming the option and value, exit 2, before anything
is read or run (the dumps and logs named here do not exist: their errors would come later). Issue 22:
`paired --gate nan` printed `FAIL ... > gate nan`, exit 1."""
import pytest
from click.testing import CliRunner

from inkling_probe.cli import group
from inkling_probe.cli.common import Real, Whole

MISSING = "/nonexistent/inkling"
CASES = [
    (["paired", MISSING, MISSING, "--gate", "nan"], "--gate nan: must be a finite number"),
    (["paired", MISSING, MISSING, "--gate", "inf"], "--gate inf: must be a finite number"),
    (["paired", MISSING, MISSING, "--gate", "-0.1"], "--gate -0.1: must be >= 0"),
    (["paired", MISSING, MISSING, "--level", "1.5"], "--level 1.5: must be >= 0.5 and <= 0.999"),
    (["paired", MISSING, MISSING, "--resamples", "5"], "--resamples 5: must be >= 100"),
    (["paired", MISSING, MISSING, "--seed", "-1"], "--seed -1: must be >= 0"),
    (["health", MISSING, "--max-repeat", "nan"], "--max-repeat nan: must be a finite number"),
    (["health", MISSING, "--max-run", "1"], "--max-run 1: must be >= 2"),
    (["health", MISSING, "--eos", "-3"], "--eos -3: must be >= 0"),
    (["health", MISSING, "--ngram", "two"], "--ngram two: expected an integer"),
    (["parity", MISSING, MISSING, "--near-tie", "nan"], "--near-tie nan: must be a finite number"),
    (["graphdiff", MISSING, MISSING, "--threshold", "nan"], "--threshold nan: must be a finite number"),
    (["graphdiff", MISSING, MISSING, "--threshold", "-1"], "--threshold -1: must be >= 0"),
    (["graphdiff", MISSING, MISSING, "--step", "-1"], "--step -1: must be >= 0"),
    (["compare", MISSING, MISSING, "--threshold", "nan"], "--threshold nan: must be a finite number"),
    (["compare", MISSING, MISSING, "-k", "0"], "-k 0: must be > 0"),
    (["compare", MISSING, MISSING, "-k", "-inf"], "-k -inf: must be a finite number"),
    (["compare", MISSING, MISSING, "--step", "1.5"], "--step 1.5: expected an integer"),
    (["compare", MISSING, MISSING, "--ref-row", "-1"], "--ref-row -1: must be >= 0"),
    (["ls", MISSING, "--step", "-1"], "--step -1: must be >= 0"),
    (["show", MISSING, "k", "--bins", "0"], "--bins 0: must be >= 1 and <= 4096"),
    (["show", MISSING, "k", "--bins", "100000000000"], "--bins 100000000000: must be >= 1 and <= 4096"),
    (["compare", MISSING, MISSING, "--jobs", "100000000"], "--jobs 100000000: must be >= 1 and <= 256"),
    (["compare", MISSING, MISSING, "--jobs", "0"], "--jobs 0: must be >= 1 and <= 256"),
    (["show", MISSING, "k", "--rank", "-1"], "--rank -1: must be >= 0"),
    (["show", MISSING, "k", "--step", "nan"], "--step nan: expected an integer"),
    (["replay", MISSING, "k", "--ckpt", MISSING, "--step", "-2"], "--step -2: must be >= 0"),
]


@pytest.mark.parametrize("args,message", CASES, ids=[" ".join(a[3:] if a[0] != "ls" else a[2:]) + f" ({a[0]})"
                                                      for a, _ in CASES])
def test_bad_number_is_one_line_before_any_work(args, message):
    res = CliRunner().invoke(group, args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"Error: {message}", res.output


def test_good_numbers_pass_and_keep_their_type():
    assert Real(min=0).convert("0.02", None, None) == 0.02 and Real(0, 1).convert(1, None, None) == 1.0
    assert Whole(min=1).convert("3", None, None) == 3 and isinstance(Whole().convert(4.0, None, None), int)

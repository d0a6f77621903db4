"""Bad input to every bisect sub-command: one line, exit 2."""
import pytest
from click.testing import CliRunner

from inkling_probe.cli import group

CASES = [
    (["layers", "--ref", "true", "--cand", "no-such-program-xyz"], "--cand: program 'no-such-program-xyz' not found"),
    (["layers", "--ref", "echo 'unbalanced", "--cand", "true"], "No closing quotation"),
    (["precision", "--cmd", "true", "--layers", "5-3"], "not an increasing range"),
    (["precision", "--cmd", "true", "--layers", "3", "--oracle", "compare:/no/such/dump"], "no such dump"),
    (["precision", "--cmd", "true", "--layers", "3", "--control-dump", "x"], "--control-dump needs --oracle compare:REF"),
    (["layers", "--ref", "true", "--cand", "true", "--threshold", "nan"], "--threshold nan: must be a finite number >= 0"),
    (["layers", "--ref", "true", "--cand", "true", "--threshold", "-1"], "--threshold -1.0: must be a finite number >= 0"),
    (["flags", "--cmd", "true", "--flag", "A=0:1", "--threshold", "nan"], "--threshold nan: must be a finite"),
    (["flags", "--cmd", "true", "--flag", "A=0:1", "--threshold", "-1"], "--threshold -1.0: must be a finite"),
    (["precision", "--cmd", "true", "--layers", "3", "--threshold", "inf"], "--threshold inf: must be a finite"),
    (["flags", "--cmd", "true", "--flag", "A=0:1", "--timeout", "nan"], "--timeout nan: must be a finite number > 0"),
    (["flags", "--cmd", "true", "--flag", "A=0:1", "--max-runs", "0"], "--max-runs 0: must be a finite number >= 1"),
    (["flags", "--cmd", "true", "--flag", "A=0:1", "--threshold", "0.1"], "--threshold needs --oracle compare:REF"),
    (["precision", "--cmd", "true", "--layers", "0-99999999999"], "no model has that many"),
    (["layers", "--ref", "true", "--cand", "true", "--map", "/no/such/map.toml"], "--map: /no/such/map.toml"),
    (["elements", "/no/such/a", "/no/such/b"], "/no/such/a: no such file or directory"),
    (["flags", "--cmd", "true", "--flag", "A=1:1"], "GOOD and BAD are the same"),
    (["flags", "--flag", "A=0:1"], "--cmd is required"),
]


@pytest.mark.parametrize("args,text", CASES)
def test_one_line_exit_2(args, text, tmp_path):
    extra = [] if args[0] == "elements" else ["-w", str(tmp_path / "w")]
    r = CliRunner().invoke(group, ["bisect", *args, *extra], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert text in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "w").exists()  # refused before any command ran


def _six_layers(tmp_path):
    import torch
    from dumps import write

    return write(tmp_path / "ref", [[(f"layers.{i}.x", torch.ones(4)) for i in range(6)]])


def test_precision_layers_the_reference_lacks(tmp_path):
    ref = _six_layers(tmp_path)
    r = CliRunner().invoke(group, ["bisect", "precision", "--cmd", "true", "--layers", "7-9", "--oracle",
                                   f"compare:{ref}", "-w", str(tmp_path / "w")], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert "layer(s) 7,8,9 not in the model" in r.output and "layers 0-5" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "w").exists()


def test_other_arguments_in_the_same_workdir(tmp_path):
    w = str(tmp_path / "w")
    run = CliRunner().invoke
    assert run(group, ["bisect", "precision", "--cmd", "true", "--layers", "3", "-w", w]).exit_code == 0
    r = run(group, ["bisect", "precision", "--cmd", "true", "--layers", "4", "-w", w])
    assert r.exit_code == 2 and "other arguments (layers differ)" in r.output


def test_a_command_that_records_nothing_says_why(tmp_path):
    import torch
    from dumps import write

    ref = write(tmp_path / "ref", [[("x", torch.ones(4))]])
    args = ["bisect", "flags", "--cmd", "true", "--flag", "A=0:1", "--oracle", f"compare:{ref}"]
    r = CliRunner().invoke(group, args + ["-w", str(tmp_path / "w")], catch_exceptions=False)
    assert r.exit_code == 2 and "fails with every flag at GOOD (" in r.output, r.output
    (tmp_path / "empty").mkdir()
    args[-1] = f"compare:{tmp_path / 'empty'}"
    r = CliRunner().invoke(group, args + ["-w", str(tmp_path / "w2")], catch_exceptions=False)
    assert r.exit_code == 2 and "compare reference: " in r.output and "not an inkling-probe dump" in r.output

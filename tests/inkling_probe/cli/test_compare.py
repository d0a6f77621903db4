"""`inkling-probe compare` through click's CliRunner: exit codes, the table, --json, bad input."""
import json
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group


def _write(path, scale_at=None, factor=1.0):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g)
    with inkling_probe.recording(path, writer="inline"):
        inkling_probe.step()
        inkling_probe.probe("embed", x)
        for i in range(3):
            x = x + torch.tanh(x) * (factor if i == scale_at else 1.0)
            inkling_probe.probe(f"layers.{i}.resid", x)
        inkling_probe.probe("logits", x)
    return str(path)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    return {"ref": _write(root / "ref"), "same": _write(root / "same"),
            "bad": _write(root / "bad", scale_at=1, factor=2.0), "root": root}


def run(*args, env=None):
    return CliRunner().invoke(group, ["compare", *args], catch_exceptions=False, env=env)


def test_within_tolerance_exits_0(dumps):
    r = run(dumps["ref"], dumps["same"])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines() == ["within tolerance: 5 keys agree (metric rel_rms; judged 40 of 40 key rows)"]  # one line
    every = run(dumps["ref"], dumps["same"], "--all")
    assert every.exit_code == 0 and "layers.1.resid" in every.output


def test_divergence_exits_1_and_names_the_culprit(dumps):
    r = run(dumps["ref"], dumps["bad"])
    assert r.exit_code == 1, r.output
    assert "culprit: layers.1.resid" in r.output and "first divergence: layers.1.resid" in r.output
    assert "CULPRIT,FIRST" in r.output
    # every verdict says what it judged: here every row, and a divergence verdict says so too
    assert "  note: coverage: judged 40 of 40 key rows (100.0%)" in r.output.splitlines(), r.output


def test_json_document(dumps):
    r = run(dumps["ref"], dumps["bad"], "--json")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert doc["culprit"]["key"] == "layers.1.resid" and doc["culprit"]["step"] == 0
    assert doc["first_divergence"]["key"] == "layers.1.resid"
    assert doc["culprit"]["metrics"]["rel_rms"] > 0
    assert [row["key"] for row in doc["rows"]] == ["embed", "layers.0.resid", "layers.1.resid", "layers.2.resid", "logits"]
    assert isinstance(doc["explanations"], list)
    ok = json.loads(run(dumps["ref"], dumps["same"], "--json").output)
    assert ok["culprit"] is None and ok["first_divergence"] is None and ok["diverged"] is False


def test_threshold_and_metric_options(dumps):
    assert run(dumps["ref"], dumps["bad"], "--threshold", "10").exit_code == 0
    assert run(dumps["ref"], dumps["bad"], "--metric", "cosine").exit_code == 1
    r = run(dumps["ref"], dumps["bad"], "--metric", "max_abs")
    assert r.exit_code == 2 and "--threshold" in r.output


def test_control_option(dumps):
    ctl = _write(dumps["root"] / "ctl2", scale_at=1, factor=1.6)  # a control off by 60% of the fault
    r = run(dumps["ref"], dumps["bad"], "--control", ctl, "--json")
    doc = json.loads(r.output)
    row = next(x for x in doc["rows"] if x["key"] == "layers.1.resid")
    assert row["floor"] > 0 and row["threshold"] == pytest.approx(2 * row["floor"])  # K x floor, no default
    assert r.exit_code == 0  # the fault is within 2x the control's own error: benign by that control
    tight = run(dumps["ref"], dumps["bad"], "--control", ctl, "-k", "1.1", "--json")
    assert tight.exit_code == 1 and json.loads(tight.output)["culprit"]["key"] == "layers.1.resid"


@pytest.mark.parametrize("which", ["missing", "not_a_dump"])
def test_bad_dump_is_one_line_exit_2(dumps, which):
    path = dumps["root"] / which
    if which == "not_a_dump":
        path.mkdir()
        (path / "x.txt").write_text("hi")
    r = run(dumps["ref"], str(path))
    assert r.exit_code == 2
    assert str(path) in r.output and len(r.output.strip().splitlines()) == 1


def test_bad_map_file_exit_2(dumps):
    bad = dumps["root"] / "bad.toml"
    bad.write_text("[[rule]]\nmatch = '('\nto = 'x'\n")
    r = run(dumps["ref"], dumps["same"], "--map", str(bad))
    assert r.exit_code == 2 and "bad.toml" in r.output and len(r.output.strip().splitlines()) == 1


def test_map_that_matches_nothing_in_common_exit_2(dumps):
    m = dumps["root"] / "drop.toml"
    m.write_text("drop_unmatched = true\n")
    r = run(dumps["ref"], dumps["same"], "--map", str(m))
    assert r.exit_code == 2 and "no key in common" in r.output


def test_no_color_and_plain_output(dumps):
    r = run(dumps["ref"], dumps["bad"], env={"NO_COLOR": "1"})
    assert "\x1b[" not in r.output


def test_help_does_not_import_torch():
    code = ("import sys; from inkling_probe.cli import main; sys.argv=['inkling-probe','compare','--help'];\n"
            "try:\n  main()\nexcept SystemExit: pass\nassert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NO_COLOR": "1"})
    assert out.returncode == 0, out.stderr
    assert "--control" in out.stdout


def test_console_entry_point_exit_codes(dumps):
    exe = os.path.join(os.path.dirname(sys.executable), "inkling-probe")
    same = subprocess.run([exe, "compare", dumps["ref"], dumps["same"]], capture_output=True, text=True)
    bad = subprocess.run([exe, "compare", dumps["ref"], dumps["bad"]], capture_output=True, text=True)
    assert (same.returncode, bad.returncode) == (0, 1), (same.stderr, bad.stderr)

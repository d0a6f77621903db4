"""A bug report's repro reproduces in a clean shell (issue 22, item 2): the candidate is recorded by
`inkling-probe run --fault raw_input_amax` (the way the demo records it; the fault reaches the run
only through INKLING_FAULT), its dump records the settings and the checkpoint's identity, and the
report's repro.sh, run under a bare `env -i` (no variable at all: the script runs everything with the
Python that wrote it), fails on the bug (exit 1), passes without it (exit 0), and says in one line that
its interpreter is gone (exit 2) when it is. A checkpoint that is not the candidate's is refused by report and extract, one line,
exit 2, before anything is written.
"""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import hunts
import inkling_probe
from inkling_probe.bundle import identity
from inkling_probe.cli import group



def clean_shell(script, cwd):
    """``env -i sh repro.sh``, literally: not even PATH."""
    return subprocess.run(["env", "-i", "sh", str(script)], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cli_cand(hunt):
    """The candidate recorded through the CLI (a subprocess: nothing of this process leaks in)."""
    dump = hunt["root"] / "cand-cli-raw-input-amax"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_")}
    res = subprocess.run([sys.executable, "-m", "inkling_probe.cli", "run", "--ckpt", hunt["ckq"], "--dtype", "bf16",
                          "--tokens", ",".join(map(str, hunts.IDS)), "--fault", "raw_input_amax", "--dump", str(dump)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-500:] + res.stderr[-500:]
    return str(dump)


@pytest.fixture(scope="module")
def bundle(hunt, cli_cand, tmp_path_factory):
    out = tmp_path_factory.mktemp("env-i") / "bug-report"
    res = CliRunner().invoke(group, ["report", hunt["ref_bf16"], cli_cand, "--control", hunt["control"],
                                     "--ckpt", hunt["ckq"], "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_the_dump_records_the_settings_and_the_checkpoint(hunt, cli_cand):
    with inkling_probe.open(cli_cand) as d:
        env = d.segments[0].run["env"]
    assert env["INKLING_FAULT"] == "raw_input_amax"
    assert env[identity.ENV] == identity.checkpoint_identity(hunt["ckq"]) != identity.checkpoint_identity(hunt["ck"])


def test_repro_sh_fails_on_the_bug_and_passes_without_it_under_env_i(bundle, monkeypatch):
    monkeypatch.delenv("INKLING_FAULT", raising=False)
    script = (bundle / "repro.sh").read_text()
    assert "--diverged-only" not in script
    assert "export INKLING_FAULT=raw_input_amax" in script and "# Expected: exit 1 while the bug is there" in script
    res = clean_shell(bundle / "repro.sh", bundle.parent)
    assert res.returncode == 1, res.stdout[-1500:] + res.stderr[-1500:]
    assert "layers.3.mlp.experts step 0 (module check): rel_rms" in res.stdout
    assert not (bundle / ".pytest_cache").exists()
    # The bug fixed: the planted fault is the bug's code, so its recorded setting off stands for the fix.
    spec = json.loads((bundle / "test_repro.json").read_text())
    spec["settings"]["INKLING_FAULT"] = None
    (bundle / "test_repro.json").write_text(json.dumps(spec))
    try:
        res = clean_shell(bundle / "repro.sh", bundle.parent)
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
        assert "1 passed" in res.stdout
    finally:
        spec["settings"]["INKLING_FAULT"] = "raw_input_amax"
        (bundle / "test_repro.json").write_text(json.dumps(spec))


def test_repro_sh_without_its_interpreter_says_so_in_one_line(amax_doc, tmp_path, monkeypatch):
    from inkling_probe.bundle import write_report

    gone = str(tmp_path / "gone" / "bin" / "python")
    monkeypatch.setattr(sys, "executable", gone)  # the Python that writes the report, removed since
    write_report(amax_doc, tmp_path / "rep")
    assert json.loads((tmp_path / "rep" / "repro.json").read_text())["python"] == gone
    res = clean_shell(tmp_path / "rep" / "repro.sh", tmp_path)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert res.stderr.splitlines() == [f"repro.sh: the recorded interpreter {gone} is gone: edit PY= in repro.sh "
                                       "to a Python with inkling-probe installed"]


def test_a_checkpoint_not_the_candidates_is_refused(hunt, cli_cand, bundle, tmp_path):
    res = CliRunner().invoke(group, ["report", hunt["ref_bf16"], cli_cand, "--control", hunt["control"],
                                     "--ckpt", hunt["ck"], "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "not the candidate's checkpoint" in res.output
    assert not (tmp_path / "rep").exists() and not (tmp_path / "rep.zip").exists()
    res = CliRunner().invoke(group, ["extract", str(bundle), "--ckpt", hunt["ck"], "-o", str(tmp_path / "t.py")])
    assert res.exit_code == 2 and "not the candidate's checkpoint" in res.output, res.output
    assert not list(tmp_path.iterdir())
    res = CliRunner().invoke(group, ["extract", str(bundle), "--ckpt", hunt["ckq"], "-o", str(tmp_path / "t.py")])
    assert res.exit_code == 0 and "fails here" in res.output, res.output

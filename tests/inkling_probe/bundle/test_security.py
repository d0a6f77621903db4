"""A report folder is safe to make from someone else's dumps and safe to run (issue 23, security):

- a dump's key name never becomes code: `report --ckpt` and `extract` write the fixed test template
  and put the key in JSON beside it, so a key built to write a marker file writes none, and a key
  holding `"` extracts (exit 0);
- repro.sh runs no recorded text: a multi-line recorded argument and `$(...)` in a dump path of a
  saved compare JSON stay words (the marker they would write is never written);
- nothing is written through a planted link (a dangling OUT.zip, OUT itself);
- a damaged or crafted document is one line, exit 2 (never a traceback, exit 3).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group

MARKER = "MARKER_WRITTEN"
HOSTILE = 'layers.0.x"+str(open("' + MARKER + '","w"))+"'  # no '/': the store refuses it in names
VENV_BIN = os.path.dirname(sys.executable)


def marked(root) -> list:
    """Marker files anywhere under ``root`` (repro.sh runs in its own folder, extract where it is called)."""
    return list(root.rglob(MARKER))


def record(path, key, value, argv=None, monkeypatch=None):
    """A one-key dump; ``argv`` is what its run records as its command line."""
    if argv is not None:
        monkeypatch.setattr(sys, "argv", argv)
    with inkling_probe.recording(str(path)):
        inkling_probe.probe(key, value)
    return str(path)


def pair(tmp_path, key, monkeypatch, argv=None):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 16, generator=g)
    ref = record(tmp_path / "ref", key, x, argv, monkeypatch)
    cand = record(tmp_path / "cand", key, x * 3, argv, monkeypatch)  # diverged: the culprit
    return ref, cand


def run_repro(folder, cwd, work=None):
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(cwd)}
    if work is not None:
        env["WORK"] = str(work)
    return subprocess.run(["sh", str(folder / "repro.sh")], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_key_name_runs_no_code_in_report_or_extract(hunt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the payload would write its marker
    ref, cand = pair(tmp_path, HOSTILE, monkeypatch)
    res = CliRunner().invoke(group, ["report", ref, cand, "--ckpt", hunt["ck"], "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert not marked(tmp_path)
    res = CliRunner().invoke(group, ["extract", str(tmp_path / "rep"), "-o", str(tmp_path / "again.py")])
    assert res.exit_code == 0, res.output
    assert not marked(tmp_path)
    template = (tmp_path / "rep" / "test_repro.py").read_text()
    assert HOSTILE not in template and (tmp_path / "again.py").read_text() == template
    assert json.loads((tmp_path / "again.json").read_text())["key"] == HOSTILE  # the key is data
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "again.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "rel_rms" in res.stdout, res.stdout[-500:]
    assert not marked(tmp_path)


def test_a_key_holding_a_quote_extracts(tmp_path, monkeypatch):
    ref, cand = pair(tmp_path, 'layers.0.say"hi"', monkeypatch)
    assert CliRunner().invoke(group, ["report", ref, cand, "-o", str(tmp_path / "rep")]).exit_code == 0
    res = CliRunner().invoke(group, ["extract", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert "tensor check of layers.0.say\"hi\"" in res.output


def test_a_multiline_recorded_argument_stays_in_its_comment(tmp_path, monkeypatch):
    argv = ["inkling-probe", "run", "--prompt", f"hello\ntouch {MARKER}\n", "--dump", "/abs/$(touch x)/d"]
    ref, cand = pair(tmp_path, "layers.0.mlp", monkeypatch, argv)
    assert CliRunner().invoke(group, ["report", ref, cand, "-o", str(tmp_path / "rep")]).exit_code == 0
    res = run_repro(tmp_path / "rep", tmp_path, work=tmp_path)
    assert not marked(tmp_path)
    assert res.returncode == 0, res.stdout[-800:] + res.stderr[-800:]
    script = (tmp_path / "rep" / "repro.sh").read_text()
    assert "$'hello\\ntouch " + MARKER + "\\n'" in script  # shown encoded, on the comment line


@pytest.mark.parametrize("side, path", [("ref", f"/elsewhere/$(touch {MARKER})"),
                                        ("cand", f'/elsewhere/"; touch {MARKER}; echo "')])
def test_a_command_substitution_in_a_saved_json_dump_path_stays_a_word(tmp_path, monkeypatch, side, path):
    ref, cand = pair(tmp_path, "layers.0.mlp", monkeypatch)
    from inkling_probe.compare import compare

    doc = compare(ref, cand).to_dict()
    doc[side] = path
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(doc))
    res = CliRunner().invoke(group, ["report", str(saved), "--map", f"`touch {MARKER}`", "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    res = run_repro(tmp_path / "rep", tmp_path, work=tmp_path)  # WORK set: the compare line runs
    assert not marked(tmp_path)
    assert "compare exited 2" in res.stdout, res.stdout[-800:] + res.stderr[-800:]  # the words name no dump


def test_no_write_through_a_planted_link(hunt, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "rep.zip").symlink_to(elsewhere / "planted.zip")  # dangling
    res = CliRunner().invoke(group, ["report", hunt["ref_fp32"], hunt["gate_up"], "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and "symbolic link" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (elsewhere / "planted.zip").exists() and not (tmp_path / "rep").exists()
    (tmp_path / "linked").symlink_to(elsewhere, target_is_directory=True)  # OUT itself a link to an empty folder
    res = CliRunner().invoke(group, ["report", hunt["ref_fp32"], hunt["gate_up"], "-o", str(tmp_path / "linked")])
    assert res.exit_code == 2 and "symbolic link" in res.output
    assert os.listdir(elsewhere) == []


def test_the_zip_is_created_new_even_when_a_link_appears_late(hunt, tmp_path):
    from inkling_probe.bundle.archive import zip_folder
    from inkling_probe.errors import ProbeError

    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a.txt").write_text("a")
    (tmp_path / "f.zip").symlink_to(tmp_path / "target.zip")
    with pytest.raises(ProbeError, match="symbolic link"):
        zip_folder(str(tmp_path / "f"))
    assert not (tmp_path / "target.zip").exists()


DAMAGE = [
    lambda d: d.update(rows=5),
    lambda d: d.update(rows=[1, 2]),
    lambda d: d["rows"][0].update(key=7),
    lambda d: d["rows"][0].update(step="zero"),
    lambda d: d["rows"][0].update(metrics=[1]),
    lambda d: d["rows"][0].update(threshold="high"),
    lambda d: d["rows"][0].update(shape="4x16"),
    lambda d: d.update(culprits={"key": "x"}),
    lambda d: d.update(culprits=[{"key": None}]),
    lambda d: d.update(first_divergence=[]),
    lambda d: d.update(explanations=[{"key": "k", "findings": 3}]),
    lambda d: d.update(ref=["a"]),
    lambda d: d.update(notes="a note"),
    lambda d: d.update(control_rows=[{"key": "k", "call": -1}]),
    lambda d: d.update(metric=None),
    lambda d: d["first_divergence"].pop("step"),
    lambda d: d.update(explanations=[{"key": None, "findings": []}]),
]


def test_damaged_documents_are_one_line_exit_2(tmp_path, monkeypatch):
    ref, cand = pair(tmp_path, "layers.0.mlp", monkeypatch)
    from inkling_probe.compare import compare

    good = compare(ref, cand).to_dict()
    res = CliRunner().invoke(group, ["report", ref, cand, "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    summary = (tmp_path / "rep" / "summary.json").read_text()
    for n, damage in enumerate(DAMAGE):
        doc = json.loads(json.dumps(good, default=str))
        damage(doc)
        saved = tmp_path / f"bad{n}.json"
        saved.write_text(json.dumps(doc))
        res = CliRunner().invoke(group, ["report", str(saved), "-o", str(tmp_path / f"o{n}")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, (n, res.output)
        assert str(saved) in res.output, (n, res.output)
        (tmp_path / "rep" / "summary.json").write_text(json.dumps(doc))  # the same damage in a report folder
        res = CliRunner().invoke(group, ["extract", str(tmp_path / "rep"), "-o", str(tmp_path / f"x{n}.py")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, (n, res.output)
    (tmp_path / "rep" / "summary.json").write_text(summary)
    for damaged in (b"not hdf5 at all", b""):
        (tmp_path / "rep" / "slice.h5").write_bytes(damaged)
        res = CliRunner().invoke(group, ["extract", str(tmp_path / "rep"), "-o", str(tmp_path / "y.py")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    (tmp_path / "rep" / "repro.json").write_text('{"settings": {"values": {"A": 1}}}')
    res = CliRunner().invoke(group, ["extract", str(tmp_path / "rep"), "-o", str(tmp_path / "z.py")])
    assert res.exit_code == 2 and "repro.json" in res.output
    shutil.rmtree(tmp_path / "rep")
    wd = tmp_path / "bisect"
    wd.mkdir()
    for n, state in enumerate([{"kind": "layers", "answer": "layers.3"}, {"kind": "layers", "answer": {"layer": ["a"]}},
                               {"kind": "layers", "answer": {"layer": "../../x"}}, {"kind": ["layers"]},
                               {"kind": "layers", "workdir": 5, "answer": {"layer": "layers.3"}}]):
        (wd / "state.json").write_text(json.dumps(state))
        for source in (wd, wd / "state.json"):
            res = CliRunner().invoke(group, ["report", str(source), "-o", str(tmp_path / f"b{n}")])
            assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, (state, res.output)

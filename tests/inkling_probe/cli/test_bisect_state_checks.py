"""The bisect state file is checked before anything runs (issue 23): edits, crafted folders, FIFOs, links."""
import json
import os
import subprocess
import sys

from click.testing import CliRunner

from inkling_probe.bisect.state import FILE, digest
from inkling_probe.cli import group

FLAGS = ["bisect", "flags", "--cmd", "sh -c 'test \"$T_B\" != 1'", "--flag", "T_A=0:1", "--flag", "T_B=0:1",
         "--flag", "T_C=0:1"]


def _bisect(w, *extra):
    return CliRunner().invoke(group, [*FLAGS, "-w", str(w), "--json", *extra], catch_exceptions=False)


def _done(tmp_path):
    w = tmp_path / "w"
    r = _bisect(w)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["answer"]["failing_set"] == ["T_B"]
    return w


def _edit(w, change, resign=False):
    doc = json.loads((w / FILE).read_text())
    change(doc)
    if resign:  # a forger who recomputes the digests
        for run in doc["runs"]:
            run["digest"] = digest(run, doc["args_digest"])
    (w / FILE).write_text(json.dumps(doc))


def _one_line_2(r, text):
    assert r.exit_code == 2, r.output
    assert text in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_an_edited_verdict_is_refused(tmp_path):
    w = _done(tmp_path)

    def flip(doc):
        for v in doc["verdicts"].values():
            v["passed"] = not v["passed"]

    _edit(w, flip)
    _one_line_2(_bisect(w), "does not match its digest (edited?)")


def test_an_edited_run_is_refused(tmp_path):
    w = _done(tmp_path)
    _edit(w, lambda doc: doc["runs"][1].update(exit_code=1))
    _one_line_2(_bisect(w), "run 2 (all-good) does not match its digest")


def test_a_crafted_run_folder_cannot_move_a_folder_into_the_workdir(tmp_path):
    w = tmp_path / "w"
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data").write_text("keep me")
    r = CliRunner().invoke(group, [*FLAGS, "-w", str(w), "--max-runs", "1"])
    assert r.exit_code == 4, r.output  # one run done, its folder under bad/ (the all-bad run fails)

    def point_outside(doc):
        doc["runs"][0]["dir"] = "pending/../../precious"
        doc["runs"][0]["dump"] = None
        doc["verdicts"].clear()  # judged again on resume: the old runner then filed the folder under bad/

    _edit(w, point_outside, resign=True)
    _one_line_2(_bisect(w), "is not pending|good|bad|inconclusive/001-LABEL; refused")
    assert (outside / "data").read_text() == "keep me"


def test_a_fifo_as_the_state_file_is_refused_at_once(tmp_path):
    w = tmp_path / "w"
    w.mkdir()
    os.mkfifo(w / FILE)
    p = subprocess.run([sys.executable, "-m", "inkling_probe.cli", *FLAGS, "-w", str(w)], capture_output=True,
                       text=True, timeout=60)  # a read of the FIFO would wait for a writer forever
    assert p.returncode == 2, p.stderr
    assert "not a regular file" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_link_as_the_state_file_is_refused(tmp_path):
    w = _done(tmp_path)
    real = tmp_path / "elsewhere.json"
    (w / FILE).rename(real)
    (w / FILE).symlink_to(real)
    _one_line_2(_bisect(w), "not a regular file")


def test_a_workdir_that_is_not_a_directory(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    _one_line_2(_bisect(tmp_path / "fifo"), "exists and is not a directory")


def test_a_state_of_an_older_version_is_refused(tmp_path):
    w = _done(tmp_path)
    _edit(w, lambda doc: doc.update(version=1))
    _one_line_2(_bisect(w), "state version 1")


def test_a_resumed_state_answers_the_same(tmp_path):
    w = _done(tmp_path)
    r = _bisect(w)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["answer"]["failing_set"] == ["T_B"] and doc["runs_resumed"] == doc["runs_done"]

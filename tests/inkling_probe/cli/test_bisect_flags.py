"""bisect flags through the CLI: a planted pair among 6 toggles, --json, budget, resume, crashes, bad input."""
import json
import os
import signal
import subprocess
import sys
import time

from click.testing import CliRunner

from inkling_probe.cli import group

SCRIPT = """
import os, signal, sys, time
bad = {n for n in "ABCDEF" if os.environ.get("T_" + n) == "1"}
with open(os.environ["COUNT_FILE"], "a") as f:
    f.write(",".join(sorted(bad)) + "\\n")
time.sleep(float(os.environ.get("SLEEP", "0")))
if "A" in bad and os.environ.get("CRASH_ON_A"):
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(1 if {"B", "E"} <= bad else 0)
"""
FLAGS = [a for n in "ABCDEF" for a in ("--flag", f"T_{n}=0:1")]


def _setup(tmp_path, monkeypatch):
    script = tmp_path / "pair.py"
    script.write_text(SCRIPT)
    monkeypatch.setenv("COUNT_FILE", str(tmp_path / "count"))
    return ["bisect", "flags", "--cmd", f"{sys.executable} {script}", *FLAGS, "-w", str(tmp_path / "w")]


def _invoke(args):
    return CliRunner().invoke(group, args, catch_exceptions=False)


def test_planted_pair_among_six(tmp_path, monkeypatch):
    r = _invoke(_setup(tmp_path, monkeypatch) + ["--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["answer"]["failing_set"] == ["T_B", "T_E"]
    runs = doc["runs"]
    assert len(runs) == doc["answer"]["tests"] == len((tmp_path / "count").read_text().splitlines())
    assert {x["dir"].split("/")[0] for x in runs} == {"good", "bad"}
    failing = [x for x in runs if not x["passed"]]
    assert all(x["dir"].startswith("bad/") and x["exit_code"] == 1 for x in failing)
    folder = tmp_path / "w" / failing[0]["dir"]
    assert (folder / "command.txt").read_text().startswith("T_A=1")
    assert (folder / "exit_code").read_text().strip() == "1"


def test_budget_then_resume_redoes_nothing(tmp_path, monkeypatch):
    args = _setup(tmp_path, monkeypatch)
    r = _invoke(args + ["--max-runs", "5"])
    assert r.exit_code == 4 and "--max-runs 5 spent" in r.output
    assert len((tmp_path / "count").read_text().splitlines()) == 5
    r = _invoke(args + ["--json"])
    doc = json.loads(r.output)
    assert doc["answer"]["failing_set"] == ["T_B", "T_E"] and doc["runs_resumed"] == 5
    assert len((tmp_path / "count").read_text().splitlines()) == len(doc["runs"])  # none redone


def test_killed_mid_way_resumes_to_the_same_answer(tmp_path, monkeypatch):
    args = _setup(tmp_path, monkeypatch)
    env = {**os.environ, "SLEEP": "0.4"}
    p = subprocess.Popen([sys.executable, "-m", "inkling_probe.cli", *args], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    state = tmp_path / "w" / "state.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not state.exists() or len(json.loads(state.read_text())["runs"]) < 3):
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    done = len(json.loads(state.read_text())["runs"])
    assert 3 <= done < 16
    doc = json.loads(_invoke(args + ["--json"]).output)
    assert doc["answer"]["failing_set"] == ["T_B", "T_E"] and doc["runs_resumed"] == done
    started = len((tmp_path / "count").read_text().splitlines())
    assert started <= len(doc["runs"]) + 1  # at most the run that was killed is done twice


def test_crash_counts_as_failing_or_stops(tmp_path, monkeypatch):
    args = _setup(tmp_path, monkeypatch)
    monkeypatch.setenv("CRASH_ON_A", "1")
    doc = json.loads(_invoke(args + ["--json"]).output)
    crashed = [x for x in doc["runs"] if x["crashed"]]
    assert crashed and all(not x["passed"] and "signal 9" in x["why"] for x in crashed)
    assert doc["answer"]["failing_set"] == ["T_A"]  # T_A crashes alone: a failure (default)
    r = _invoke(args[:-1] + [str(tmp_path / "w2"), "--on-crash", "stop"])
    assert r.exit_code == 2 and "crashed: killed by signal 9" in r.output


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args, text in ((["--cmd", "true", "--flag", "NOEQUALS"], "expected NAME=GOOD:BAD"),
                       (["--cmd", "no-such-program-xyz", "--flag", "A=0:1"], "not found"),
                       (["--cmd", "true", "--flag", "A=0:1", "--oracle", "bogus"], "expected 'exit'"),
                       (["--cmd", "true", "--model", "nope"], "not registered")):
        r = _invoke(["bisect", "flags", *args, "-w", str(tmp_path / "w")])
        assert r.exit_code == 2 and text in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_no_shell_unless_asked(tmp_path):
    out = tmp_path / "o"
    args = ["bisect", "flags", "--flag", "A=0:1", "--json"]
    cmd = f"echo $A > {out}"
    r = _invoke(args + ["--cmd", cmd, "-w", str(tmp_path / "w1")])
    assert r.exit_code == 2  # echo passes either way: nothing to bisect
    assert not out.exists()  # '>' went to echo as an argument: no shell
    r = _invoke(args + ["--cmd", f"test \"$A\" != 1", "--shell", "-w", str(tmp_path / "w2")])
    assert json.loads(r.output)["answer"]["failing_set"] == ["A"]


def test_model_toggles_are_listed():
    r = CliRunner().invoke(group, ["bisect", "flags", "--model", "inkling_model", "--list"],
                           env={"COLUMNS": "240"})  # the table unwrapped, whatever the terminal (xdist: 80)
    assert r.exit_code == 0
    for name in ("cuda_graph", "INKLING_CUDA_GRAPH", "allreduce", "INKLING_ALLREDUCE", "nvfp4_experts",
                 "fault_raw_input_amax", "INKLING_FAULT_RAW_INPUT_AMAX"):
        assert name in r.output


def test_progress_reports_each_run_once(tmp_path, monkeypatch):
    from inkling_probe.bisect.flags import bisect_flags
    from inkling_probe.bisect.oracle import ExitOracle
    from inkling_probe.bisect.runner import Command, Runner
    from inkling_probe.bisect.state import State
    from inkling_probe.bisect.toggles import parse_flag

    args = _setup(tmp_path, monkeypatch)
    events = []
    runner = Runner(State(tmp_path / "w", "flags", {}), progress=lambda e, i: events.append((e, i.get("n"))))
    bisect_flags(runner, ExitOracle(), Command(args[3]), [parse_flag(f) for f in FLAGS[1::2]])
    assert not [e for e in events if e[0] == "cached"]  # repeats in one session are not reported
    assert len([e for e in events if e[0] == "done"]) == len(runner.state.runs)

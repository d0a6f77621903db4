"""A bisect SIGKILLed mid-run, then resumed (issue 23): the orphaned run is killed and waited for before
anything is redone, and the redone run never shares its folder. Five kill-and-resume rounds.

The fake command keeps writing its pid into its dump while it runs (a recording in progress) and
fails (exit 3) when it finds another run's pid there: two runs in one dump. Without the fix the
orphan of the killed bisect writes into the redone run's dump, the all-good run fails, and the
resumed bisect says "the oracle fails with every flag at GOOD" (exit 2) instead of naming T_B.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FAKE = r'''
import os, sys, time
d, marks = sys.argv[1], os.environ.get("MARKS")
me = os.getpid()
bad = [n for n in ("T_A", "T_B", "T_C", "T_D") if os.environ.get(n) == "1"]
hang = os.environ.get("HANG") == "1" and not bad
if marks:
    open(os.path.join(marks, f"started-{me}"), "w").write("all-good" if not bad else "+".join(bad))
end = time.monotonic() + (120 if hang else 0.3)
while True:
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, f"pid-{me}"), "w").close()
    if time.monotonic() >= end:
        break
    time.sleep(0.03)
if any(f.startswith("pid-") and f != f"pid-{me}" for f in os.listdir(d)):
    sys.exit(3)
sys.exit(1 if "T_B" in bad else 0)
'''


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2] != "Z"


def _bisect(fake: Path, w: Path, env: dict):
    args = [sys.executable, "-m", "inkling_probe.cli", "bisect", "flags", "--cmd", f"{sys.executable} {fake} {{dump}}",
            *[a for n in "ABCD" for a in ("--flag", f"T_{n}=0:1")], "-w", str(w), "--json"]
    return args, {**os.environ, **env}


def _one_round(tmp_path: Path, fake: Path, i: int) -> None:
    w, marks = tmp_path / f"w{i}", tmp_path / f"marks{i}"
    marks.mkdir()
    args, env = _bisect(fake, w, {"HANG": "1", "MARKS": str(marks)})
    p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    orphan = None
    try:
        end = time.monotonic() + 120
        while orphan is None and time.monotonic() < end and p.poll() is None:
            found = [f for f in marks.iterdir() if f.read_text() == "all-good"]
            orphan = int(found[0].name.split("-")[1]) if found else None
            time.sleep(0.05)
        assert orphan is not None, "the all-good run never started"
        time.sleep(0.2)  # it is writing into its dump now
        p.send_signal(signal.SIGKILL)  # the bisect alone: its child run is orphaned
        p.wait()
        assert _alive(orphan)
        args, env = _bisect(fake, w, {"MARKS": str(marks)})
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["answer"]["failing_set"] == ["T_B"]
        assert not _alive(orphan)  # killed and waited for before the redo
        dirs = [x["dir"] for x in doc["runs"]]
        assert len(set(dirs)) == len(dirs) and "good/002-all-good" in dirs  # filed under its usual name
    finally:
        if p.poll() is None:
            p.kill()
        if orphan is not None and _alive(orphan):
            os.kill(orphan, signal.SIGKILL)  # the fake run this test started, by its pid


def test_kill_then_resume_five_times(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    for i in range(5):
        _one_round(tmp_path, fake, i)


def _wait_started(marks: Path, p) -> int:
    end = time.monotonic() + 120
    while time.monotonic() < end and p.poll() is None:
        found = [f for f in marks.iterdir() if f.read_text() == "all-good"]
        if found:
            return int(found[0].name.split("-")[1])
        time.sleep(0.05)
    raise AssertionError("the all-good run never started")


def test_a_second_bisect_is_refused_and_sigterm_ends_the_run_in_progress(tmp_path):
    fake, w, marks = tmp_path / "fake.py", tmp_path / "w", tmp_path / "marks"
    fake.write_text(FAKE)
    marks.mkdir()
    args, env = _bisect(fake, w, {"HANG": "1", "MARKS": str(marks)})
    p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        child = _wait_started(marks, p)
        r = subprocess.run(args, env={**env, "HANG": "0"}, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "another bisect is running in this work directory" in r.stderr, r.stderr
        assert _alive(child)  # the second one touched nothing
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 128 + signal.SIGTERM
        assert not _alive(child)  # its whole group went with it
    finally:
        if p.poll() is None:
            p.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_state_naming_another_process_group_kills_nothing(tmp_path):
    """A live entry whose group carries no token of ours (a crafted state, a reused number) is left alone."""
    from inkling_probe import procs

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        ident = procs.identity(other.pid, procs.new_token())  # its start time copied, but not our token
        assert procs.reap(ident, timeout=1.0) and _alive(other.pid)
        ident = procs.identity(other.pid)  # no token recorded (no /proc to read it from): pgid + start decide
        assert procs.is_ours(ident)
    finally:
        other.kill()
        other.wait()

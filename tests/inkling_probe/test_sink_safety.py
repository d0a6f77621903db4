"""Probes under stress: several threads, a fork, bad names, and interrupted steps. Each tensor is
recorded or refused with a clear error; no step that did not finish is marked complete."""
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import inkling_probe
from inkling_probe import sink
from inkling_probe.errors import DumpError, SettingsError


@pytest.mark.parametrize("writer", ["inline", "process"])
def test_probes_from_several_threads_are_all_recorded(tmp_path, writer):
    n_threads, per_thread = 4, 300
    with inkling_probe.recording(tmp_path / "d", writer=writer):
        inkling_probe.step()

        def work(k):
            for i in range(per_thread):
                inkling_probe.probe(f"t{k}", torch.full((8,), float(i)))
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    d = inkling_probe.open(tmp_path / "d")
    assert len(d.index) == n_threads * per_thread
    for k in range(n_threads):  # each thread's calls keep their order: call i holds value i
        assert [float(d.array(f"t{k}", 0, call=i)[0]) for i in range(per_thread)] == list(range(per_thread))


FORK = """
import os, sys, torch, inkling_probe
writer = sys.argv[1]
inkling_probe.step()
inkling_probe.probe("before", torch.ones(300, 300))
pid = os.fork()
if pid == 0:
    try:
        inkling_probe.probe("child", torch.ones(2))
    except inkling_probe.errors.DumpError as e:
        print("child refused:", "fork of the recording process" in str(e), flush=True)
    sys.exit(0)          # a normal exit: atexit runs in the child
os.waitpid(pid, 0)
inkling_probe.probe("after", torch.full((300, 300), 2.0))
inkling_probe.step()
inkling_probe.probe("next", torch.ones(3))
print("parent done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["inline", "process"])
def test_a_forked_child_neither_records_nor_closes_the_parents_writer(tmp_path, writer):
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), "INKLING_PROBE_WRITER": writer}
    r = subprocess.run([sys.executable, "-c", "import inkling_probe.errors\n" + FORK, writer], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "child refused: True\nparent done\n", r.stderr
    assert r.stderr == ""
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == ["before", "after", "next"] and d.complete_through_step() == 1
    assert bool((d.tensor("after") == 2).all()) and d.tensor("next", 1).tolist() == [1.0] * 3


@pytest.mark.parametrize("name, why", [
    (".", "not empty, '.' or '..'"), ("..", "not empty, '.' or '..'"), ("", "not empty"),
    ("a\0b", "must not contain '\\x00'"), ("a#1", "must not contain '#'"), ("a/b", "must not contain '/'"),
    (3, "expected a str"),
])
def test_bad_names_are_refused_naming_the_key_and_recording_goes_on(tmp_path, name, why):
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.probe("a", torch.ones(2))
        with pytest.raises(SettingsError) as e:
            inkling_probe.probe(name, torch.ones(2))
        assert repr(name) in str(e.value) and why in str(e.value) and "\n" not in str(e.value)
        inkling_probe.probe("a", torch.zeros(2))
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == ["a"] and d.tensor("a", call=1).tolist() == [0.0, 0.0]


def test_an_exception_mid_step_leaves_that_step_incomplete(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with inkling_probe.recording(tmp_path / "d"):
            for s in range(3):
                inkling_probe.step()
                inkling_probe.probe("x", torch.full((2,), float(s)))
                if s == 2:
                    1 / 0
    d = inkling_probe.open(tmp_path / "d")
    assert d.steps("x") == [0, 1, 2] and d.complete_through_step() == 1


def test_a_failing_probe_mid_step_leaves_that_step_incomplete(tmp_path):
    with pytest.raises(TypeError):
        with inkling_probe.recording(tmp_path / "d"):
            inkling_probe.step()
            inkling_probe.probe("x", torch.ones(2))
            inkling_probe.step()
            inkling_probe.probe("x", torch.ones(2))
            inkling_probe.probe("y", "not a tensor")
    assert inkling_probe.open(tmp_path / "d").complete_through_step() == 0


INTERRUPTED = """
import os, signal, torch, inkling_probe
for s in range(3):
    inkling_probe.step()
    inkling_probe.probe("x", torch.full((2,), float(s)))
    if s == 1:
        os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C mid step 1
"""


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["inline", "process"])
def test_ctrl_c_mid_step_marks_only_finished_steps_complete(tmp_path, writer):
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), "INKLING_PROBE_WRITER": writer}
    r = subprocess.run([sys.executable, "-c", INTERRUPTED], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == -2 and "KeyboardInterrupt" in r.stderr  # Python re-raises SIGINT
    d = inkling_probe.open(tmp_path / "d")
    assert d.steps("x") == [0, 1] and d.complete_through_step() == 0


WRITER_DIES = """
import os, signal, torch, inkling_probe
inkling_probe.step()
inkling_probe.probe("x", torch.ones(2))
rec = inkling_probe.sink.active_recorder()
inkling_probe.probe("y", torch.ones(2))   # opens the writer
os.kill(rec._writer._proc.pid, signal.SIGKILL)
rec._writer._proc.wait()
inkling_probe.step()
"""


@pytest.mark.slow
def test_a_dead_writer_is_one_line_with_no_atexit_traceback(tmp_path):
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), "INKLING_PROBE_WRITER": "process"}
    env.pop("INKLING_PROBE_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", WRITER_DIES], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("inkling-probe: ") and "writer" in lines[0], r.stderr


def test_after_a_writer_failure_later_probes_raise_the_same_error(tmp_path, monkeypatch):
    from inkling_probe.store.writer import SegmentWriter

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")
    with pytest.raises(DumpError, match="disk full"):
        with inkling_probe.recording(tmp_path / "d", writer="inline"):
            monkeypatch.setattr(SegmentWriter, "_add", full)
            with pytest.raises(DumpError, match=r"recording 'x' \(step 0\) in .*disk full") as first:
                inkling_probe.probe("x", torch.ones(2))
            with pytest.raises(DumpError) as again:
                inkling_probe.probe("y", torch.ones(2))
            assert str(again.value) == str(first.value)
            raise again.value
    assert not inkling_probe.enabled()


CTRL_C_AT_START = """
import os, signal, torch
import inkling_probe          # INKLING_PROBE is set: the writer process starts here
inkling_probe.step()
inkling_probe.probe("x", torch.full((300, 300), 3.0))
os.killpg(0, signal.SIGINT)   # Ctrl-C to the whole process group while the writer is still starting
"""


@pytest.mark.slow
def test_ctrl_c_while_the_writer_starts_keeps_step_0(tmp_path):
    """The terminal's Ctrl-C reaches every process of the group; the writer, still importing, must
    not die of it: it sees the recording process end and keeps step 0 (marked incomplete)."""
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), "INKLING_PROBE_WRITER": "process"}
    r = subprocess.run([sys.executable, "-c", CTRL_C_AT_START], env=env, capture_output=True, text=True,
                       timeout=120, start_new_session=True)
    assert r.returncode == -2 and "KeyboardInterrupt" in r.stderr
    for _ in range(200):  # the writer finishes after the recording process is gone
        if any(n.endswith(".h5") for n in os.listdir(tmp_path / "d")):
            break
        time.sleep(0.05)
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == ["x"] and bool((d.tensor("x") == 3).all()) and d.complete_through_step() == -1

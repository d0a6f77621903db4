"""A stopped writer process (SIGSTOP) stalled ``step()`` for ever with no word: every wait on the
writer is bounded while it is stopped, and says so (store/stall.py)."""
import os
import signal
import time

import pytest
import torch

import inkling_probe
from inkling_probe import sink
from inkling_probe.store import stall

pytestmark = pytest.mark.slow


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(stall, "STOPPED_S", 2.0)
    monkeypatch.setattr(stall, "NOTICE_S", 1.0)


def _writer_pid():
    return sink.active_recorder()._writer._proc.pid


@pytest.mark.parametrize("size", [(4,), (1024, 1024)])  # an acknowledgement / a full pipe or ring
def test_step_with_a_stopped_writer_ends_in_one_line(tmp_path, quick, size):
    pid = None
    try:
        with pytest.raises(stall.WriterStalled) as e:
            with inkling_probe.recording(str(tmp_path / "d"), writer="process"):
                inkling_probe.step()
                inkling_probe.probe("x", torch.ones(4))
                pid = _writer_pid()
                os.kill(pid, signal.SIGSTOP)
                t0 = time.monotonic()
                for _ in range(200):  # 4 MB a probe fills the pipe and ring; small ones wait in step()
                    inkling_probe.probe("y", torch.ones(size))
                    inkling_probe.step()
        assert time.monotonic() - t0 < 10
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
    message = str(e.value)
    assert "\n" not in message and f"the writer process (pid {pid}) has been stopped for" in message
    assert f"kill -CONT {pid}" in message


def test_a_writer_that_runs_but_is_slow_gets_a_notice_and_the_wait_goes_on(capsys, quick, monkeypatch):
    states = iter(["S"] * 100)
    monkeypatch.setattr(stall, "process_state", lambda pid: next(states))
    w = stall.Watch(123, "the step's acknowledgement")
    r, wfd = os.pipe()
    try:
        import threading
        threading.Timer(1.6, lambda: os.write(wfd, b"ok\n")).start()
        w.wait_fd(r)
    finally:
        os.close(r)
        os.close(wfd)
    err = capsys.readouterr().err
    assert err.startswith("inkling-probe: waiting 1 s so far for the step's acknowledgement from the writer "
                          "process (pid 123, sleeping)") and err.count("\n") == 1

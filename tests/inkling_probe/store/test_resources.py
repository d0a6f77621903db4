"""Resource faults end well: a small, full, read-only or missing /dev/shm falls back with one warning
line; a full disk or a file size limit stops recording with one line naming the key (no traceback,
no signal) and leaves the completed steps readable; a writer failure leaves no atexit noise."""
import os
import resource
import shutil
import subprocess
import sys

import pytest
import torch

import inkling_probe

ROOT = os.geteuid() == 0 and shutil.which("unshare") is not None
needs_root = pytest.mark.skipif(not ROOT, reason="needs root and unshare for a private tmpfs mount")
pytestmark = pytest.mark.slow

RECORD = """
import sys, torch, inkling_probe
for s in range(int(sys.argv[1])):
    inkling_probe.step()
    inkling_probe.probe("x", torch.full((150 * (s + 1), 300), float(s)))   # 176 KiB x (s + 1)
    inkling_probe.probe("y", torch.full((4,), float(s)))
print("finished", flush=True)
"""


def run(dump, steps, *, writer, shell_prefix="", preexec=None, extra_env=None):
    env = {**os.environ, "INKLING_PROBE": str(dump), "INKLING_PROBE_WRITER": writer, **(extra_env or {})}
    env.pop("INKLING_PROBE_DEBUG", None)
    argv = [sys.executable, "-c", RECORD, str(steps)]
    if shell_prefix:
        argv = ["unshare", "-m", "sh", "-c", shell_prefix + ' && exec "$@"', "sh", *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, preexec_fn=preexec)


def assert_steps(dump, steps):
    d = inkling_probe.open(dump)
    assert d.steps("x") == list(range(steps))
    for s in range(steps):
        assert bool((d.tensor("x", s) == s).all()) and d.tensor("y", s).tolist() == [float(s)] * 4


@needs_root
@pytest.mark.parametrize("shm", ["size=64k", "size=64k,ro"], ids=["tiny", "read-only"])
def test_small_or_read_only_shm_falls_back_with_one_warning(tmp_path, shm):
    """Docker's /dev/shm is 64 MiB (too small for the 128 MiB ring, and for half of it with its header); here 64 KiB."""
    r = run(tmp_path / "d", 3, writer="process", shell_prefix=f"mount -t tmpfs -o {shm} tmpfs /dev/shm")
    assert r.returncode == 0 and r.stdout == "finished\n", r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("inkling-probe: no ") and "ring" in lines[0], r.stderr
    assert ("ring is in" in lines[0]) == (shm == "size=64k,ro")  # read-only: the temp dir; tiny: the pipe
    assert_steps(tmp_path / "d", 3)


def test_missing_shm_and_temp_dir_fall_back_to_the_pipe(monkeypatch, tmp_path):
    from inkling_probe.store import ring

    monkeypatch.setattr(ring, "SHM_DIR", str(tmp_path / "no-shm"))
    monkeypatch.setattr(ring.tempfile, "gettempdir", lambda: str(tmp_path / "no-tmp"))
    warnings = []
    assert ring.ring_file(warnings.append) is None
    assert len(warnings) == 1 and "large tensors go through the pipe" in warnings[0]
    from inkling_probe.store import writer_process

    monkeypatch.setattr(writer_process, "_warn", warnings.append)
    with inkling_probe.recording(tmp_path / "d", writer="process"):
        for s in range(2):
            inkling_probe.step()
            inkling_probe.probe("x", torch.full((300, 300), float(s)))
            inkling_probe.probe("y", torch.full((4,), float(s)))
    assert len(warnings) == 2
    assert_steps(tmp_path / "d", 2)


def test_ring_leaves_nothing_in_shm_even_when_killed_at_start(tmp_path):
    before = set(os.listdir("/dev/shm"))
    from inkling_probe.store.writer_process import ProcessWriter

    w = ProcessWriter()
    assert not set(os.listdir("/dev/shm")) - before  # unlinked before the writer even started
    w.close(-1)


def _check_full(r, dump, writer, why):
    assert r.returncode == 1 and "finished" not in r.stdout
    assert "Traceback" not in r.stderr and "Segmentation" not in r.stderr
    lines = r.stderr.splitlines()
    if writer == "process":  # the ring can't be reserved under the limit either: one warning
        assert "ring" in lines[0] and len(lines) == 2, r.stderr
        lines = lines[1:]
    assert len(lines) == 1 and lines[0].startswith("inkling-probe: ") and why in lines[0], r.stderr
    if writer == "inline":
        assert "'x'" in lines[0]
    assert_steps(dump, 2)


@needs_root
@pytest.mark.parametrize("writer", ["inline", "process"])
def test_disk_full_is_one_line(tmp_path, writer):
    dump = tmp_path / "d"
    dump.mkdir()
    r = run(dump, 20, writer=writer, shell_prefix=f"mount -t tmpfs -o size=1m tmpfs {dump}")
    # the tmpfs is gone with the namespace: what it held can't be checked from here, the exit can
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "disk full" in lines[0], r.stderr


@pytest.mark.parametrize("writer", ["inline", "process"])
def test_file_size_limit_is_one_line_and_keeps_completed_steps(tmp_path, writer):
    limit = 512 << 10  # steps 0 and 1 fit, step 2 does not

    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    r = run(tmp_path / "d", 20, writer=writer, preexec=preexec,
            extra_env={"INKLING_PROBE_SEGMENT_MB": "0.1", "INKLING_PROBE_PACK_KB": "0"})
    _check_full(r, tmp_path / "d", writer, "file size limit")


def test_ring_is_reserved_by_the_writer_and_used_once_ready(tmp_path):
    """Spawning costs the recording process no reservation; once the writer reports the ring,
    large tensors go through it and read back exact."""
    import time

    from inkling_probe.store.writer_process import ProcessWriter

    t0 = time.perf_counter()
    w = ProcessWriter()
    spawn = time.perf_counter() - t0
    w._ring_status(block=True)
    assert w._ring is not None and w._ring.size == 128 << 20
    w.close(-1)
    assert spawn < 1.0  # generous: no 128 MiB fallocate in this process (that took ~45 ms alone)
    with inkling_probe.recording(tmp_path / "d", writer="process") as rec:
        rec._spare._ring_status(block=True)
        for s in range(2):
            inkling_probe.step()
            inkling_probe.probe("x", torch.full((150, 300), float(s)))
            inkling_probe.probe("y", torch.full((4,), float(s)))
        assert rec._writer._ring.head > 0  # the large tensors went through the ring
    assert_steps(tmp_path / "d", 2)

"""Crash safety: a recording process killed with SIGKILL at any point leaves a dump that opens and
holds every step that completed, bit-exact.

A real child process records 20 deterministic tensors per step (float32, bf16, fp16, fp64, ints,
bool, fp8; one > 256 KiB that gets its own dataset, the rest in packs) and prints ``done N`` when
``inkling_probe.step()`` has returned, i.e. when steps < N are on disk. The parent kills it at known
points and recomputes every tensor to check what the dump holds.
"""
import inspect
import io
import marshal
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError

pytestmark = pytest.mark.slow

N_TENSORS = 20
BIG = 4       # index of the tensor > 256 KiB (own dataset; through the shared ring in process mode)
PAUSE_AT = 10  # the child prints "mid N" (and pauses) after recording tensors 0..PAUSE_AT of step N


def step_tensors(step):
    """The (name, tensor) pairs the child records at ``step``: deterministic per (step, index)."""
    import torch

    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
              torch.int32, torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn]
    out = []
    for i in range(20):
        g = torch.Generator().manual_seed(1000 * step + i)
        dtype = dtypes[i % len(dtypes)]
        shape = (300, 256) if i == 4 else (3 + i, 7)  # 300 x 256 float32 = 300 KiB
        if i == 4:
            dtype = torch.float32
        if dtype is torch.bool:
            t = torch.randn(shape, generator=g) > 0
        elif dtype is torch.uint8:
            t = torch.randint(0, 256, shape, generator=g, dtype=dtype)
        elif not dtype.is_floating_point:
            t = torch.randint(-100, 100, shape, generator=g, dtype=dtype)
        else:
            t = (torch.randn(shape, generator=g) * 3).to(dtype)
        out.append((f"layers.{i}.{str(dtype).removeprefix('torch.')}", t))
    return out


CHILD_MAIN = """
import sys, time
import inkling_probe

handshake, pause = sys.argv[1] == "1", float(sys.argv[2])


def say(line):  # with the handshake, wait for the parent's go after every line
    print(line, flush=True)
    if handshake:
        sys.stdin.readline()


for n in range(1000):
    inkling_probe.step()
    say(f"done {n}")
    for i, (name, t) in enumerate(step_tensors(n)):
        inkling_probe.probe(name, t)
        if i == PAUSE_AT:
            say(f"mid {n}")
            time.sleep(pause)
"""

NAMES = [name for name, _ in step_tensors(0)]


def test_step_tensors_cover_what_the_claims_need():
    t = dict(step_tensors(0))
    assert len(t) == N_TENSORS and NAMES[BIG] == "layers.4.float32"
    assert t[NAMES[BIG]].numel() * 4 > 256 * 1024 > max(v.numel() * 8 for k, v in t.items() if k != NAMES[BIG])
    assert {v.dtype for v in t.values()} >= {torch.bfloat16, torch.float8_e4m3fn, torch.bool, torch.uint8}
    assert not torch.equal(step_tensors(1)[0][1], step_tensors(0)[0][1])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.numel() else t


def _start(path, writer, *, handshake, pause, env=None):
    script = inspect.getsource(step_tensors) + f"PAUSE_AT = {PAUSE_AT}\n" + CHILD_MAIN
    env = {**os.environ, "INKLING_PROBE": str(path), "INKLING_PROBE_WRITER": writer, **(env or {})}
    return subprocess.Popen([sys.executable, "-c", script, "1" if handshake else "0", str(pause)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)


def _live_group_members(pgid: int) -> list[int]:
    """Pids of the not-yet-dead processes in process group ``pgid`` (zombies excluded)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                state, _ppid, pgrp = fh.read().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def run_and_kill(path, writer, *, at, whole_group, handshake=True, pause=0.0, delay=0.0, env=None):
    """Run the child until it prints ``at`` (e.g. ``("done", 3)``), wait ``delay`` s, SIGKILL it
    (with ``whole_group``: its writer process too); return the last step it said was ``done``."""
    child = _start(path, writer, handshake=handshake, pause=pause, env=env)
    last_done = -1
    try:
        for line in child.stdout:
            word, n = line.decode().split()
            if word == "done":
                last_done = int(n)
            if (word, int(n)) == at:
                time.sleep(delay)
                if whole_group:
                    os.killpg(child.pid, signal.SIGKILL)
                else:
                    child.kill()
                break
            if handshake:
                child.stdin.write(b"\n")
                child.stdin.flush()
        else:
            pytest.fail(f"child exited before {at}: {child.stderr.read().decode()[-2000:]}")
    finally:
        child.wait(30)
    deadline = time.monotonic() + 30  # a surviving writer process finishes its segment, then exits
    while _live_group_members(child.pid):
        assert time.monotonic() < deadline, "writer process did not exit after the recorder died"
        time.sleep(0.02)
    return last_done


def check_dump(path, last_done, *, partial_last_step_allowed):
    """Every step < last_done is there with all its keys; every stored tensor is bit-exact; steps
    are 0..m-1 and only the last may be partial (a prefix in execution order). Returns the dump.
    (Pass ``last_done - 1`` where one finished step may still be on its way to the disk.)"""
    d = inkling_probe.open(path)
    by_step: dict[int, list[str]] = {}
    for r in d.index:
        by_step.setdefault(r["step"], []).append(r["key"])
    steps = sorted(by_step)
    assert steps == list(range(len(steps))) and len(steps) >= last_done
    for s in steps:
        complete = by_step[s] == NAMES
        prefix = by_step[s] == NAMES[: len(by_step[s])]
        assert complete or (s == steps[-1] and s >= last_done and partial_last_step_allowed and prefix), \
            f"step {s} holds {len(by_step[s])} of {N_TENSORS} keys"
        for name, want in step_tensors(s)[: len(by_step[s])]:
            got = d.tensor(name, s)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(_bits(got), _bits(want)), f"{name} step {s} differs"
    assert d.complete_through_step() >= last_done - 1
    return d


@pytest.mark.parametrize("writer,k,whole_group", [("process", 1, False), ("process", 3, True),
                                                   ("inline", 2, False)])
def test_kill_right_after_a_step_ends(tmp_path, writer, k, whole_group):
    """Killed while blocked just after step() returned: exactly steps 0..k-1, nothing unfinished."""
    last = run_and_kill(tmp_path / "d", writer, at=("done", k), whole_group=whole_group)
    d = check_dump(tmp_path / "d", last, partial_last_step_allowed=False)
    assert last == k and d.steps(NAMES[0]) == list(range(k))
    assert d.complete_through_step() == k - 1 and d.unfinished == []


@pytest.mark.parametrize("writer,whole_group", [("process", False), ("process", True), ("inline", False)])
def test_kill_at_a_random_time_mid_step(tmp_path, writer, whole_group):
    """Killed at a (seeded) random moment while the child runs free, pausing mid-step: every step
    it said was done is there; only a surviving writer process may add a partial last step."""
    seed = 1234 + 10 * (writer == "inline") + whole_group
    delay = random.Random(seed).uniform(0.0, 0.25)
    last = run_and_kill(tmp_path / "d", writer, at=("done", 2), whole_group=whole_group,
                        handshake=False, pause=0.1, delay=delay)
    # a partial step survives only where a writer process outlived the recorder to finish it
    survivor = writer == "process" and not whole_group
    d = check_dump(tmp_path / "d", last, partial_last_step_allowed=survivor)
    if survivor:
        assert d.unfinished == [], "the surviving writer left its segment unfinished"


def test_kill_mid_step_leaves_the_unfinished_segment_ignored(tmp_path):
    """Inline writer killed mid-step 2: the step's .tmp segment stays and the reader skips it."""
    last = run_and_kill(tmp_path / "d", "inline", at=("mid", 2), whole_group=False)
    d = check_dump(tmp_path / "d", last, partial_last_step_allowed=False)
    assert last == 2 and d.steps(NAMES[0]) == [0, 1]
    assert [os.path.basename(p)[:19] for p in d.unfinished] == ["rank00000-seg000002"]


def test_surviving_writer_keeps_the_crashed_steps_tensors(tmp_path):
    """Recorder killed mid-step 2 (after the big tensor was sent): the writer process finishes the
    segment, marked complete only through step 1, with a prefix of step 2 that includes the big one."""
    last = run_and_kill(tmp_path / "d", "process", at=("mid", 2), whole_group=False)
    d = check_dump(tmp_path / "d", last, partial_last_step_allowed=True)
    step2 = [r["key"] for r in d.index if r["step"] == 2]
    assert NAMES[BIG] in step2 and len(step2) < N_TENSORS
    assert d.complete_through_step() == 1 and d.unfinished == []


# -- INKLING_PROBE_DURABILITY=writer: step() waits for the step before, not the one just ended ----
WRITER_DURABLE = {"INKLING_PROBE_DURABILITY": "writer"}


@pytest.mark.parametrize("seed", [0, 1])
def test_writer_durability_keeps_every_step_when_the_model_process_dies(tmp_path, seed):
    """Only the recording process killed (its writer process lives on): every step it said was done
    is on disk, as with the default durability, whatever moment the kill hit."""
    delay = random.Random(seed).uniform(0.0, 0.25)
    last = run_and_kill(tmp_path / "d", "process", at=("done", 3), whole_group=False, handshake=False,
                        pause=0.1, delay=delay, env=WRITER_DURABLE)
    d = check_dump(tmp_path / "d", last, partial_last_step_allowed=True)
    assert d.unfinished == []


def test_writer_durability_loses_at_most_the_last_step_when_the_writer_dies_too(tmp_path):
    """The whole group killed right after step() returned for step k: steps before k-1 are on disk
    (step() waited for them); step k-1 may be missing, never part of a step other than the last."""
    k = 3
    last = run_and_kill(tmp_path / "d", "process", at=("done", k), whole_group=True, env=WRITER_DURABLE)
    d = check_dump(tmp_path / "d", last - 1, partial_last_step_allowed=False)
    assert last == k and d.steps(NAMES[0])[: k - 1] == list(range(k - 1))
    assert d.complete_through_step() >= k - 2


def _one_line_dump_error(path) -> str:
    with pytest.raises(DumpError) as e:
        inkling_probe.open(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


@pytest.mark.parametrize("writer,whole_group", [("inline", False), ("process", True)])
def test_killed_before_the_first_step_completes_is_a_one_line_error(tmp_path, writer, whole_group):
    """No completed step and no surviving writer: opening raises DumpError (one line, names the
    folder) that says the run died before its first step ended."""
    run_and_kill(tmp_path / "d", writer, at=("mid", 0), whole_group=whole_group)
    message = _one_line_dump_error(tmp_path / "d")
    if writer == "inline":  # the inline writer had its segment open: it is there, unfinished
        assert "1 unfinished segment(s)" in message


def test_killed_before_the_first_step_with_surviving_writer_opens_with_no_complete_step(tmp_path):
    """The writer process outlives the recorder: the dump opens, says no step completed
    (complete_through_step -1), and holds step 0's tensors up to the kill, bit-exact."""
    run_and_kill(tmp_path / "d", "process", at=("mid", 0), whole_group=False)
    d = check_dump(tmp_path / "d", 0, partial_last_step_allowed=True)
    assert d.complete_through_step() == -1 and d.steps(NAMES[BIG]) == [0]


# -- the writer process at end-of-file, without a recorder ----------------------------------------
def _frame(header: dict, payload: bytes = b"") -> bytes:
    from inkling_probe.store.writer_process import _FRAME

    head = marshal.dumps(header)
    return _FRAME.pack(len(head), len(payload)) + head + payload


def _add_frame(key: str, seq: int, array: np.ndarray, **number) -> bytes:
    """An 'add' frame; ``n=K`` numbers it as the recording process does (the writer applies each once)."""
    row = {"key": key, "step": 0, "seq": seq, "call": 0, "rank": 0, "shape": "x".join(map(str, array.shape)),
           "dtype": "float32", "storage": "native", "shard": "replicated", "dim": -1, "token_dim": 0,
           "token_start": 0, "numel": array.size, "meta": ""}
    return _frame({"op": "add", "row": row, "np": array.dtype.str, "shape": array.shape, "stats": True,
                   "store": True, "attrs": None, **number}, array.tobytes())


def _shared_ring():
    """(the writer's RingReader, the recording process's RingWriter) of one small shared ring."""
    from inkling_probe.store import ring as ring_mod

    fd = ring_mod.ring_file(lambda text: None)
    writer_fd = os.dup(fd)
    reader = ring_mod.RingReader(fd, 1 << 16)
    recorder_side = ring_mod.RingWriter(writer_fd, reader.size)
    recorder_side.close_fd()
    return reader, recorder_side


@pytest.mark.parametrize("cut", ["whole", "in_frame_size", "in_header", "in_payload"])
def test_writer_process_finishes_its_segment_at_end_of_file(tmp_path, cut):
    """The recorder killed while writing a frame leaves part of a frame in the pipe: the writer must
    still keep the whole frames before it (docstring: 'even the tensors of a crashed step survive')."""
    from inkling_probe.store.writer_process import serve

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    stream = _frame({"op": "open", "path": str(tmp_path), "rank": 0, "world_size": 1,
                     "run_id": "0123456789ab"}) + _add_frame("a", 0, a)
    tail = _add_frame("b", 1, a + 1)
    stream += {"whole": b"", "in_frame_size": tail[:5], "in_header": tail[:20], "in_payload": tail[:-4]}[cut]
    assert serve(io.BytesIO(stream), io.BytesIO()) == 0
    d = inkling_probe.open(tmp_path)
    assert d.keys() == ["a"] and torch.equal(d.tensor("a"), torch.from_numpy(a))
    assert d.complete_through_step() == -1 and d.unfinished == []


def test_writer_process_applies_the_logged_batch_once_at_end_of_file(tmp_path):
    """The recording process batches messages (a few MB of tensors a pipe write) and mirrors the
    batch in the ring's log. Killed with a batch not yet written (or written in part), the writer
    applies at end of file the logged messages it never received, and none twice."""
    from inkling_probe.store.writer_process import serve

    reader, recorder_side = _shared_ring()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    opened = _frame({"op": "open", "path": str(tmp_path), "rank": 0, "world_size": 1, "run_id": "0123456789ab",
                     "n": 1})
    first, second, third = (_add_frame(k, i, a + i, n=i + 2) for i, k in enumerate("abc"))
    assert recorder_side.log(first + second + third, 0)  # the batch; the pipe delivered 'open', 'a' and half of 'b'
    assert serve(io.BytesIO(opened + first + second[:-3]), io.BytesIO(), reader) == 0
    d = inkling_probe.open(tmp_path)
    assert d.keys() == ["a", "b", "c"] and [len(d.rows(k)) for k in "abc"] == [1, 1, 1]
    assert all(torch.equal(d.tensor(k), torch.from_numpy(a + i)) for i, k in enumerate("abc"))
    recorder_side.clear_log()
    assert reader.logged() == b""


def test_a_logged_message_that_cannot_be_applied_still_leaves_the_segment_closed(tmp_path, capsys):
    """A logged frame the writer can't apply (here: its ring bytes lie outside the ring) stops the
    replay with one line; what the pipe delivered before it is kept in a closed segment."""
    from inkling_probe.store.writer_process import serve

    reader, recorder_side = _shared_ring()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    opened = _frame({"op": "open", "path": str(tmp_path), "rank": 0, "world_size": 1, "run_id": "0123456789ab",
                     "n": 1})
    delivered = _add_frame("a", 0, a, n=2)
    broken = _frame({"op": "add", "n": 3, "ring": (1 << 40, 0, 24, 24), "np": "<f4", "shape": (2, 3),
                     "row": {"key": "b"}, "stats": True, "store": True})
    assert recorder_side.log(broken, 0)
    assert serve(io.BytesIO(opened + delivered), io.BytesIO(), reader) == 0
    assert "could not apply the recording's last messages" in capsys.readouterr().err
    d = inkling_probe.open(tmp_path)
    assert d.keys() == ["a"] and d.unfinished == []

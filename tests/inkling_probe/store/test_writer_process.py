"""The writer process's side of durability: segment ends sent without waiting
(``INKLING_PROBE_DURABILITY=writer``), and failures surfacing one step later as one line."""
import os

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store import schema
from inkling_probe.store.folder import run_id
from inkling_probe.store.writer_process import ProcessWriter, WriterDied

RUN = "0123456789ab"


def row(key, array, step, seq):
    return {"key": key, "step": step, "seq": seq, "call": 0, "rank": 0, "shape": schema.shape_text(array.shape),
            "dtype": "float32", "storage": "native", "shard": "replicated", "dim": -1, "token_dim": -1,
            "token_start": 0, "numel": array.size, "meta": ""}


def step_arrays(step):
    rng = np.random.default_rng(step)
    return [rng.standard_normal((256, 300)).astype(np.float32),  # 300 KiB: through the ring
            rng.standard_normal(7).astype(np.float32)]


def add_step(w, step):
    for i, a in enumerate(step_arrays(step)):
        w.add(row(f"t{i}", a, step, i), a)


def segments(folder):
    return sorted(n for n in os.listdir(folder) if schema.SEGMENT_RE.match(n))


def test_an_end_not_waited_for_is_on_disk_once_the_next_end_returns(tmp_path):
    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    add_step(w, 0)
    w.end_segment(0, wait=False)
    add_step(w, 1)
    w.end_segment(1, wait=False)  # returns after step 0's acknowledgement
    assert segments(tmp_path)[:1] == [schema.segment_name(0, 0, RUN)]
    add_step(w, 2)
    w.close(2)  # waits for step 1's and its own
    assert segments(tmp_path) == [schema.segment_name(0, n, RUN) for n in range(3)]
    d = inkling_probe.open(tmp_path)
    assert d.complete_through_step() == 2
    for step in range(3):
        for i, a in enumerate(step_arrays(step)):
            assert np.array_equal(d.array(f"t{i}", step), a)


def test_a_failure_in_a_step_not_waited_for_is_raised_by_a_later_call(tmp_path):
    """Step 1's segment can't be created (a file planted at its name): the writer process fails
    after step 0 was acknowledged late; the failure reaches the recording side as one line naming
    the file, not the pending 'ok' of step 0."""
    planted = tmp_path / (schema.segment_name(0, 1, RUN) + schema.TMP_SUFFIX)
    planted.write_bytes(b"not ours")
    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    add_step(w, 0)
    w.end_segment(0, wait=False)
    with pytest.raises(WriterDied) as e:
        add_step(w, 1)
        w.end_segment(1, wait=False)
        w.close(1)
    message = str(e.value)
    assert "\n" not in message and str(planted) in message and "already exists" in message
    w.abandon()
    assert inkling_probe.open(tmp_path).steps("t0") == [0]


def test_a_writer_that_died_is_named_by_its_error_not_by_an_unread_ok(tmp_path):
    """The writer acknowledged step 0 (not read yet: nobody waited), then failed and exited: the
    next write to the pipe (a full batch, or the step's end) finds it broken and reports the
    writer's error line, skipping the 'ok'."""
    planted = tmp_path / (schema.segment_name(0, 1, RUN) + schema.TMP_SUFFIX)
    planted.write_bytes(b"not ours")
    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    add_step(w, 0)
    w.end_segment(0, wait=False)
    add_step(w, 1)
    w._flush()
    assert w._proc.wait(timeout=30) == 1  # failed on step 1's segment, after acknowledging step 0
    with pytest.raises(WriterDied) as e:
        add_step(w, 2)
        w.end_segment(2)
    assert str(planted) in str(e.value) and "already exists" in str(e.value)
    w.abandon()


def test_writer_durability_waits_for_the_step_before_also_after_an_empty_step(tmp_path):
    """Step 0 recorded, step 1 filtered out (nothing recorded): step() at the end of step 1 still
    returns only once step 0 is on disk."""
    folder = tmp_path / "d"
    with inkling_probe.recording(folder, writer="process", durability="writer", steps="0,2") as rec:
        inkling_probe.step()
        inkling_probe.probe("t0", torch.ones(256, 300))
        inkling_probe.step()  # step 0 is with the writer
        assert rec._writer._unacked == 1
        inkling_probe.probe("t0", torch.ones(256, 300))  # step 1: not recorded
        inkling_probe.step()  # returns once step 0 is on disk
        assert rec._writer._unacked == 0  # acknowledged: not left for a later step or close()
        assert segments(folder) == [schema.segment_name(0, 0, _run_of(folder))]


def _run_of(folder) -> str:
    return (folder / schema.lock_name(0)).read_text().split()[0]


def test_recording_with_writer_durability_matches_the_default(tmp_path):
    """The same probes recorded with each durability give the same dump contents, bit-exact."""
    tensors = {step: [torch.from_numpy(a) for a in step_arrays(step)] for step in range(4)}
    for durability in ("disk", "writer"):
        with inkling_probe.recording(tmp_path / durability, writer="process", durability=durability):
            for step, ts in tensors.items():
                inkling_probe.step()
                for i, t in enumerate(ts):
                    inkling_probe.probe(f"t{i}", t)
    a, b = inkling_probe.open(tmp_path / "disk"), inkling_probe.open(tmp_path / "writer")
    assert [(r["key"], r["step"], r["hash"]) for r in a.index] == [(r["key"], r["step"], r["hash"]) for r in b.index]
    assert a.complete_through_step() == b.complete_through_step() == 3


def test_writer_durability_failure_stops_the_recording_with_one_line(tmp_path):
    """Through the sink: the writer fails on step 1's segment; step() or the end of the recording
    raises one DumpError line naming the planted file; step 0 stays readable."""
    folder = tmp_path / "d"
    planted = folder / (schema.segment_name(0, 1, run_id({}, 1, "r1")) + schema.TMP_SUFFIX)
    with pytest.raises(DumpError) as e:
        with inkling_probe.recording(folder, writer="process", durability="writer", run="r1"):
            for step in range(4):
                inkling_probe.step()
                if step == 1:
                    planted.write_bytes(b"not ours")
                for i, a in enumerate(step_arrays(step)):
                    inkling_probe.probe(f"t{i}", torch.from_numpy(a))
    message = str(e.value)
    assert "\n" not in message and "already exists" in message
    assert inkling_probe.open(folder).steps("t0")[:1] == [0]



# -- the batched pipe and the ring's message log (review of 564a978) ----------------------------
MB = 1 << 20


def ring_ready(w):
    w._ring_status(block=True)
    assert w._ring is not None


def test_claiming_the_ring_sends_the_batched_ring_messages_first(tmp_path):
    """A ring message still batched when GPU staging claims the ring would hold the writer's tail
    (it frees space in order): the claimer's first slot, which must wrap past it, would wait for
    ever. claim_ring() sends the batch first."""
    import threading

    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    ring_ready(w)
    ring, seq = w._ring, 0
    while ring.head + MB <= ring.size // 2 - MB:  # sent: the writer frees these
        a = np.zeros(MB // 4, np.float32)
        w.add(row(f"a{seq}", a, 0, seq), a, stats=False, store=False)
        seq += 1
    w._flush()
    held = np.zeros(2 * MB // 4, np.float32)  # straddles the middle, its message batched
    w.add(row("held", held, 0, seq), held, stats=False, store=False)
    assert w._batch and ring.head > ring.size // 2
    w.claim_ring()
    taken, gave_up = {}, threading.Event()

    def wait():
        if gave_up.is_set():
            raise TimeoutError
        w.wait_for_ring_space()

    def take():
        try:
            taken["view"] = ring.slot(ring.size // 2, wait)
        except TimeoutError:
            pass
    t = threading.Thread(target=take)
    t.start()
    t.join(20)
    gave_up.set()
    t.join(5)
    assert "view" in taken, "the claimer's first slot waited for a ring message never sent"
    ring.forget(taken["view"])
    w.abandon()


def test_a_write_cut_part_way_sends_nothing_more_and_the_writer_keeps_the_batch(tmp_path):
    """Ctrl-C while the pipe was full, after part of a batch went out: the pipe ends mid-message.
    close() (as atexit calls it) must not write after the torn frame nor wait for an answer that
    cannot come: it raises one line, and the writer applies the logged batch at end-of-file."""
    import inkling_probe.store.writer_process as wp

    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    ring_ready(w)
    w._flush()
    arrays = [np.full(20000, i, np.float32) for i in range(3)]  # 80 KB each: batched in the pipe, logged
    for i, a in enumerate(arrays):
        w.add(row(f"k{i}", a, 0, i), a)
    assert w._batch
    real = wp._write_all

    def torn(fd, parts, watch=None):
        data = b"".join(bytes(p) for p in parts)
        real(fd, [data[: len(data) // 2]], watch)
        raise KeyboardInterrupt
    wp._write_all = torn
    try:
        with pytest.raises(KeyboardInterrupt):
            w._flush()
    finally:
        wp._write_all = real
    with pytest.raises(DumpError, match="stopped part-way"):
        w.close(complete_through_step=-1)
    assert w._proc.wait(30) == 0
    d = inkling_probe.open(tmp_path)
    assert d.keys() == ["k0", "k1", "k2"]
    assert all(np.array_equal(d.array(f"k{i}", 0), a) for i, a in enumerate(arrays))


def test_a_ring_that_comes_late_logs_what_was_batched_before_it(tmp_path):
    """Messages batched while the writer's ring line had not been read yet are logged when the ring
    comes, so a recorder that goes without a last write loses none of them, and none is applied twice."""
    w = ProcessWriter()
    w._ring_pending = False  # the writer's ring line not read yet
    w.open(tmp_path, 0, 1, run_id=RUN)
    small = [np.full(7, i, np.float32) for i in range(3)]
    for i, a in enumerate(small):
        w.add(row(f"s{i}", a, 0, i), a)
    assert w._ring is None and w._batch
    w._ring_pending = True
    w._ring_status(block=True)
    big = np.arange(300 * 256, dtype=np.float32)  # through the ring, its message batched
    w.add(row("big", big, 0, 3), big)
    assert w._batch and w._ring is not None
    w.abandon()  # end-of-file with the batch never written
    assert w._proc.wait(30) == 0
    d = inkling_probe.open(tmp_path)
    assert sorted(d.keys()) == ["big", "s0", "s1", "s2"] and all(len(d.rows(k)) == 1 for k in d.keys())
    assert np.array_equal(d.array("big", 0), big)


def test_the_writer_imports_the_recording_process_s_own_copy_of_the_package(tmp_path):
    """A script that found inkling_probe only through a sys.path entry of its own (a checkout run from
    a subfolder, a copy beside an installed one) gets a writer running that same copy: the copy here
    marks its writer's start in a file, and the dump is written."""
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "elsewhere"
    shutil.copytree(os.path.dirname(inkling_probe.__file__), copy / "inkling_probe",
                    ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "marker"
    module = copy / "inkling_probe" / "store" / "writer_process.py"
    module.write_text(module.read_text().replace(
        "def main() -> int:\n", f"def main() -> int:\n    open({str(marker)!r}, 'w').close()\n", 1))
    script = (f"import sys; sys.path.insert(0, {str(copy)!r})\n"
              "import numpy as np\n"
              "from inkling_probe.store.writer_process import ProcessWriter\n"
              f"w = ProcessWriter().open({str(tmp_path / 'dump')!r}, 0, 1, run_id={RUN!r})\n"
              "a = np.arange(6, dtype=np.float32)\n"
              "w.add({'key': 'x', 'step': 0, 'seq': 0, 'call': 0, 'rank': 0, 'shape': '6', 'dtype': 'float32',"
              " 'storage': 'native', 'shard': 'replicated', 'dim': -1, 'token_dim': -1, 'token_start': 0,"
              " 'numel': 6, 'meta': ''}, a)\n"
              "w.close(0)\n")
    (tmp_path / "dump").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "INKLING_PROBE")}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert np.array_equal(inkling_probe.open(tmp_path / "dump").array("x", 0), np.arange(6, dtype=np.float32))


def test_the_writer_process_runs_numpy_blas_on_one_thread_whatever_the_model_asked(tmp_path, monkeypatch):
    """Its job threads are its parallelism; an OpenBLAS pool of every core spins between the
    statistics' dot products (0.8 s of writer CPU a GPU forward, issue 44). The recording process's
    own setting is left alone."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "16")
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    try:
        with open(f"/proc/{w._proc.pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        assert env[b"OPENBLAS_NUM_THREADS"] == env[b"OMP_NUM_THREADS"] == env[b"MKL_NUM_THREADS"] == b"1"
        assert os.environ["OPENBLAS_NUM_THREADS"] == "16"
        add_step(w, 0)
    finally:
        w.close(0)
    assert np.array_equal(inkling_probe.open(tmp_path).array("t0", 0), step_arrays(0)[0])


def test_reference_rows_travel_many_to_a_message_and_all_before_the_segment_ends(tmp_path, monkeypatch):
    from inkling_probe.store import writer_process

    w = ProcessWriter().open(tmp_path, 0, 1, run_id=RUN)
    ops = []
    send = w._send
    monkeypatch.setattr(w, "_send", lambda header, payload=b"": (ops.append(header["op"]), send(header, payload))[1])
    arrays = step_arrays(0)
    for step in range(2):
        add_step(w, step)
        n = writer_process._REFS_A_MESSAGE + 10
        for i in range(n):  # every one names t0 of its step (a module input that was an output)
            w.add_ref({**row(f"r{i}", arrays[0], step, 2 + i), "ref": "t0"})
        w.end_segment(step)
    w.close(1)
    # per step: the two tensors, one full message of references mid-step, the rest before the end
    assert ops == ["add", "add", "refs", "refs", "end"] * 2 + ["close"], ops
    d = inkling_probe.open(tmp_path)
    assert d.complete_through_step() == 1
    for step in range(2):
        target = [r for r in d.index if r["key"] == "t0" and r["step"] == step][0]
        refs = [r for r in d.index if r["key"].startswith("r") and r["step"] == step]
        assert len(refs) == writer_process._REFS_A_MESSAGE + 10
        assert all(r["hash"] == target["hash"] and r["dataset"] == target["dataset"] for r in refs)
        assert np.array_equal(d.array(f"r{n - 1}", step), step_arrays(step)[0])

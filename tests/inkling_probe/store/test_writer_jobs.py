"""Large tensors hashed, summarised and written by job threads (store/jobs.py ``_Jobs``)."""
import errno
import os
import threading

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store import ring, schema
from inkling_probe.store.writer import SegmentWriter


def row(key, array, step=0, call=0, seq=0):
    return {"key": key, "step": step, "seq": seq, "call": call, "rank": 0, "shape": schema.shape_text(array.shape),
            "dtype": "float32", "storage": "native", "shard": "replicated", "dim": -1, "token_dim": -1,
            "token_start": 0, "numel": array.size, "meta": ""}


def arrays(n=40):
    rng = np.random.default_rng(0)
    out = [rng.standard_normal((64, 1024 + i)).astype(np.float32) for i in range(n)]  # >= 256 KiB: own datasets
    out[3][0, :5] = [np.nan, np.inf, -np.inf, 0, 1]
    out += [rng.standard_normal(10).astype(np.float32), np.zeros((0, 4), np.float32), np.float32(2.5) * np.ones(())]
    return out


def write(path, workers, data, on_stored=None):
    os.makedirs(path)
    w = SegmentWriter(path, 0, 1, run_id="0123456789ab", workers=workers)
    for i, a in enumerate(data):
        w.add(row(f"t{i}", a, seq=i), a, on_stored=on_stored)
    w.close(complete_through_step=0)


@pytest.mark.parametrize("workers", [1, 3])
def test_job_threads_write_what_the_writer_thread_writes(tmp_path, workers):
    data = arrays()
    write(tmp_path / "serial", 0, data)
    write(tmp_path / "jobs", workers, data)
    a, b = inkling_probe.open(tmp_path / "serial"), inkling_probe.open(tmp_path / "jobs")
    assert a.keys() == b.keys() and len(b.keys()) == len(data)
    for ra, rb in zip(a.index, b.index):
        assert ra["hash"] == rb["hash"]
        for k in ("mean", "rms", "absmax", "nan", "inf"):
            assert ra[k] == rb[k] or (np.isnan(ra[k]) and np.isnan(rb[k])), (ra["key"], k)
    for i, arr in enumerate(data):
        got = b.array(f"t{i}", 0)
        assert got.shape == arr.shape and np.array_equal(got, arr, equal_nan=True)
    r3 = next(r for r in b.index if r["key"] == "t3")
    assert (r3["nan"], r3["inf"]) == (1, 2)


def test_a_caller_buffer_is_copied_or_kept_until_on_stored(tmp_path):
    """Without on_stored the writer copies (the caller reuses its buffer at once); with it, the
    buffer is left alone until the callback says the bytes are in the file."""
    buf = np.ones((64, 2048), np.float32)
    os.makedirs(tmp_path / "d")
    w = SegmentWriter(tmp_path / "d", 0, 1, run_id="0123456789ab", workers=2)
    for i in range(20):
        buf[:] = i
        w.add(row("reused", buf, call=i), buf)
    stored = []
    held = [np.full((64, 2048), float(i), np.float32) for i in range(20)]
    for i, a in enumerate(held):
        w.add(row("held", a, call=i), a, on_stored=lambda i=i: stored.append(i))
    w.close(complete_through_step=0)
    assert sorted(stored) == list(range(20))
    d = inkling_probe.open(tmp_path / "d")
    assert [float(d.array("reused", 0, call=i)[0, 0]) for i in range(20)] == [float(i) for i in range(20)]
    assert [float(d.array("held", 0, call=i)[-1, -1]) for i in range(20)] == [float(i) for i in range(20)]


def test_a_job_failure_is_one_line_naming_the_key_and_nothing_is_renamed(tmp_path, monkeypatch):
    real = os.pwrite

    def full(fd, data, offset):
        if threading.current_thread().name.startswith("inkling-probe-write"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)
    monkeypatch.setattr(os, "pwrite", full)
    os.makedirs(tmp_path / "d")
    w = SegmentWriter(tmp_path / "d", 0, 1, run_id="0123456789ab", workers=2)
    a = np.ones((64, 2048), np.float32)
    w.add(row("big", a), a)
    with pytest.raises(DumpError) as e:
        w.close(complete_through_step=0)
    msg = str(e.value)
    assert msg.startswith("recording 'big' (step 0)") and "disk full" in msg and "\n" not in msg
    assert not [f for f in os.listdir(tmp_path / "d") if f.endswith(".h5")]  # only the .tmp stays


def test_a_large_tensor_is_hashed_and_written_by_two_jobs_and_freed_once_both_are_done(tmp_path, monkeypatch):
    from inkling_probe.store import jobs

    monkeypatch.setattr(jobs, "_SPLIT_BYTES", 1 << 18)
    parts = []
    real_run = jobs._Jobs._run

    def run(self, *a, **k):
        parts.append((k.get("summarise", True), k.get("write", True)))
        return real_run(self, *a, **k)
    monkeypatch.setattr(jobs._Jobs, "_run", run)
    data = arrays(6)
    stored = []
    write(tmp_path / "split", 2, data, on_stored=lambda: stored.append(1))
    write(tmp_path / "serial", 0, data)
    assert parts.count((True, False)) == parts.count((False, True)) == 6  # the six >= 256 KiB tensors
    assert len(stored) == len(data)  # once per tensor, after both halves
    a, b = inkling_probe.open(tmp_path / "serial"), inkling_probe.open(tmp_path / "split")
    for ra, rb in zip(a.index, b.index):
        assert (ra["hash"], ra["nan"], ra["inf"]) == (rb["hash"], rb["nan"], rb["inf"])
    for i, arr in enumerate(data):
        assert np.array_equal(b.array(f"t{i}", 0), arr, equal_nan=True)


def fake_fallocate(code):
    import ctypes

    calls = []

    def fallocate(fd, mode, offset, nbytes):
        calls.append((offset, nbytes))
        ctypes.set_errno(code)
        return -1 if code else 0
    return fallocate, calls


def test_blocks_are_reserved_before_each_write_and_skipped_where_unsupported(tmp_path, monkeypatch):
    from inkling_probe.store import diskio

    fallocate, calls = fake_fallocate(0)
    monkeypatch.setattr(diskio, "_FALLOCATE", [fallocate])
    write(tmp_path / "a", 2, arrays(4))
    assert sorted(n for _, n in calls) == [64 * (1024 + i) * 4 for i in range(4)]  # each own dataset's bytes
    unsupported, calls = fake_fallocate(errno.EOPNOTSUPP)
    monkeypatch.setattr(diskio, "_FALLOCATE", [unsupported])
    write(tmp_path / "b", 0, arrays(4))
    assert len(calls) == 1 and diskio._FALLOCATE == [False]  # tried once, then plain writes
    d = inkling_probe.open(tmp_path / "b")
    assert np.array_equal(d.array("t2", 0), arrays(4)[2])


def test_a_disk_full_found_by_the_reservation_is_one_line_naming_the_key(tmp_path, monkeypatch):
    from inkling_probe.store import diskio

    full, _ = fake_fallocate(errno.ENOSPC)
    monkeypatch.setattr(diskio, "_FALLOCATE", [full])
    with pytest.raises(DumpError) as e:
        write(tmp_path / "d", 2, arrays(4))
    assert str(e.value).startswith("recording 't") and "disk full" in str(e.value) and "\n" not in str(e.value)


def test_ring_space_is_freed_in_order_whatever_order_jobs_finish(tmp_path):
    fd = ring.ring_file(lambda text: None)
    reader = ring.RingReader(fd, 1 << 16)
    first, second, third = reader.pending(0, 100), reader.pending(100, 200), reader.pending(200, 300)
    tail = lambda: ring._TAIL.unpack_from(reader._mm, 0)[0]
    second()
    assert tail() == 0  # the first payload is still being written
    first()
    assert tail() == 200
    third()
    assert tail() == 300


def test_ring_space_is_freed_in_head_order_whatever_order_payloads_arrive(tmp_path):
    """Slots are sent as their copies complete: a payload registered first may lie later in the
    ring; the tail only passes a payload once everything before it in the head's sequence is done."""
    fd = ring.ring_file(lambda text: None)
    reader = ring.RingReader(fd, 1 << 16)
    tail = lambda: ring._TAIL.unpack_from(reader._mm, 0)[0]
    late = reader.pending(300, 1000)  # arrives first
    late()
    assert tail() == 0  # [0, 300) not even registered yet
    early = reader.pending(0, 300)
    early()
    assert tail() == 1000


def test_ring_slots_are_sent_by_position_and_wrap_without_splitting(tmp_path):
    fd = ring.ring_file(lambda text: None)
    os.posix_fallocate(fd, 0, ring._HEADER + 1000)
    w = ring.RingWriter(fd, 1000)
    assert w.address() % 4096 == 0 and w.mapped_bytes() == ring._HEADER + 1000
    a = w.slot(600, wait=lambda: None)
    a[:] = 7
    with pytest.raises(ValueError):
        w.placed(a[10:20])  # inside the ring but not a slot's start: it would never be freed
    assert w.placed(np.ones(600, np.uint8)) is None  # outside the ring: an ordinary array
    assert w.placed(a[:500]) == (0, 0, 640)  # the slot's first bytes: the whole slot (64-byte aligned) is freed
    with pytest.raises(ValueError):
        w.placed(a)  # sent once
    waits = []

    def wait():
        waits.append(1)
        ring._TAIL.pack_into(w._mm, 0, 640)  # the writer finished the first payload
    b = w.slot(590, wait)  # 360 left at the end: skips to the start, waits for the tail
    assert waits and w.placed(b) == (0, 640, 1640)  # [640, 1000) skipped, 590 rounded up to 640
    w.close()


def test_recording_with_writer_threads_through_the_recorder(tmp_path):
    """The setting reaches the writer in both modes; tensors probed from a reused buffer keep their values."""
    for mode in ("inline", "process"):
        x = torch.zeros(128, 1024)
        with inkling_probe.recording(tmp_path / mode, writer=mode, writer_threads=3):
            for s in range(2):
                inkling_probe.step()
                for i in range(6):
                    x.fill_(10 * s + i)
                    inkling_probe.probe("x", x)
                    inkling_probe.probe("bf", x.bfloat16())
        d = inkling_probe.open(tmp_path / mode)
        assert d.complete_through_step() == 1
        for s in range(2):
            for i in range(6):
                assert float(d.array("x", s, call=i)[5, 5]) == 10 * s + i
                assert d.tensor("bf", s, call=i).dtype == torch.bfloat16
                assert float(d.tensor("bf", s, call=i)[0, 0]) == 10 * s + i


def test_writer_threads_setting_is_validated():
    from inkling_probe import settings
    from inkling_probe.errors import SettingsError

    assert settings.make("/tmp/x", writer_threads="auto").writer_threads is None
    assert settings.make("/tmp/x", writer_threads=2).writer_threads == 2
    with pytest.raises(SettingsError, match="INKLING_PROBE_WRITER_THREADS='-1'"):
        settings.make("/tmp/x", writer_threads=-1)


def test_plain_h5py_reads_bf16_as_numbers_and_the_original_dtype_of_an_upcast_dataset(tmp_path):
    """A bf16 dataset is 2 bytes a value with HDF5's bfloat16 type (h5py reads float32 numbers); an
    fp8 one is stored as float16 with attributes naming the original dtype."""
    import h5py

    fp8 = (torch.randn(256, 1024) * 4).to(torch.float8_e4m3fn)
    with inkling_probe.recording(tmp_path / "d", writer="inline"):
        inkling_probe.probe("h", torch.full((256, 512), 1.5, dtype=torch.bfloat16))
        inkling_probe.probe("e", fp8)
    seg = next(p for p in os.listdir(tmp_path / "d") if p.endswith(".h5"))
    with h5py.File(tmp_path / "d" / seg, "r") as f:
        ds = f["tensors/0/h"]
        assert dict(ds.attrs) == {} and ds.dtype == np.float32 and ds.id.get_type().get_size() == 2
        assert (ds[()] == 1.5).all() and ds.id.get_storage_size() == 256 * 512 * 2
        ds = f["tensors/0/e"]
        assert dict(ds.attrs) == {"dtype": "float8_e4m3fn", "storage": "upcast"} and ds.dtype == np.float16
        assert np.array_equal(ds[()], fp8.float().numpy().astype(np.float16))

def test_blocks_are_not_reserved_on_tmpfs_where_it_would_zero_them_first(tmp_path, monkeypatch):
    """On tmpfs ``fallocate`` zeroes pages the write then copies over: the writer skips it there."""
    from inkling_probe.store import diskio

    shm = "/dev/shm"
    if not os.path.isdir(shm) or not diskio._in_memory(os.open(shm, os.O_RDONLY)):
        pytest.skip("no tmpfs at /dev/shm")
    fallocate, calls = fake_fallocate(0)
    monkeypatch.setattr(diskio, "_FALLOCATE", [fallocate])
    import tempfile
    with tempfile.TemporaryDirectory(dir=shm) as d:
        write(os.path.join(d, "a"), 0, arrays(4))
        assert calls == []
        assert np.array_equal(inkling_probe.open(os.path.join(d, "a")).array("t1", 0), arrays(4)[1])
    write(tmp_path / "b", 0, arrays(4))
    assert diskio._in_memory(os.open(tmp_path, os.O_RDONLY)) or len(calls) == 4  # a disk: reserved


@pytest.mark.parametrize("serial", [True, False])
def test_job_threads_take_turns_at_writing_into_the_segment(tmp_path, monkeypatch, serial):
    """Four job threads hash side by side but write one at a time (``SERIAL_WRITES``); with it off
    they overlap. The dump is the same either way."""
    import time

    from inkling_probe.store import diskio, jobs

    monkeypatch.setattr(jobs, "SERIAL_WRITES", serial)
    inside, most, lock = [0], [0], threading.Lock()
    real = diskio._pwrite_all

    def slow_pwrite(fd, data, offset):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.005)  # long enough for another job thread to arrive
        real(fd, data, offset)
        with lock:
            inside[0] -= 1
    monkeypatch.setattr(diskio, "_pwrite_all", slow_pwrite)
    data = arrays(16)
    write(tmp_path / "d", 4, data)
    assert most[0] == 1 if serial else most[0] > 1
    d = inkling_probe.open(tmp_path / "d")
    for i, arr in enumerate(data):
        assert np.array_equal(d.array(f"t{i}", 0), arr, equal_nan=True)

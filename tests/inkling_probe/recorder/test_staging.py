"""The asynchronous device-to-host path (staging.py, step_batch.py, drain.py), run on CPU: the real
queue, drain thread and pinned-buffer pool, with the device parts (copy engine, events, pinned
allocation) stood in for."""
import os
import threading
import time

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe import settings, sink
from inkling_probe.recorder import staging, step_batch
from inkling_probe.errors import DumpError
from inkling_probe.recorder.drain import Drain
from inkling_probe.recorder.recorder import Recorder


class SlowStager:
    """A stand-in for the GPU: stage() snapshots the tensor (as a stream-ordered copy would) and
    wait() blocks like an event that completes late, so the drain really lags the recording thread."""

    def __init__(self, delay=0.002):
        self.delay, self.staged, self.released = delay, 0, 0

    def stage(self, t):
        self.staged += 1
        return t.clone(), None

    def wait(self, token):
        time.sleep(self.delay)

    def release(self, token):
        self.released += 1


def recording(path, stager, **kw):
    sink.start(settings.make(path, writer="inline", **kw))
    rec = sink.active_recorder()
    rec._stager = stager
    return rec


def test_staged_tensors_are_written_in_order_and_step_waits_for_them(tmp_path):
    stager = SlowStager()
    recording(tmp_path / "d", stager)
    for s in range(3):
        inkling_probe.step()
        x = torch.zeros(4)
        for i in range(20):
            x += 1  # the model reuses its buffer: each probe must keep the value it had
            inkling_probe.probe("x", x)
    inkling_probe.step()  # returns when step 2 is on disk, drain included
    d = inkling_probe.open(tmp_path / "d")
    assert d.complete_through_step() == 2
    assert [float(d.array("x", 2, call=i)[0]) for i in range(20)] == [float(i + 1) for i in range(20)]
    sink.stop()
    assert stager.staged == stager.released == 60
    assert len(inkling_probe.open(tmp_path / "d").index) == 60


def test_buffers_go_back_only_when_writer_jobs_have_written_them(tmp_path):
    """With job threads the drain hands the staged buffer over and gets it back from the job."""
    stager = SlowStager(delay=0)
    recording(tmp_path / "d", stager, writer_threads=2)
    x = torch.zeros(256, 512)  # 512 KiB: a dataset of its own, written by a job
    for s in range(2):
        inkling_probe.step()
        for i in range(8):
            x.fill_(i)
            inkling_probe.probe("x", x)
    sink.stop()
    assert stager.staged == stager.released == 16
    d = inkling_probe.open(tmp_path / "d")
    assert [float(d.array("x", 1, call=i)[-1, -1]) for i in range(8)] == [float(i) for i in range(8)]


def test_a_drain_failure_surfaces_as_one_line_in_the_recording_thread(tmp_path, monkeypatch):
    from inkling_probe.store.writer import SegmentWriter

    recording(tmp_path / "d", SlowStager())
    inkling_probe.step()
    inkling_probe.probe("ok", torch.ones(2))
    inkling_probe.step()

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(SegmentWriter, "_add", full)
    inkling_probe.probe("x", torch.ones(2))  # queued: fails in the drain thread
    with pytest.raises(DumpError) as e:
        inkling_probe.step()
    assert "disk full" in str(e.value) and "'x'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DumpError):
        inkling_probe.probe("y", torch.ones(2))
    sink.stop()
    assert inkling_probe.open(tmp_path / "d").keys() == ["ok"]


def test_probes_from_threads_through_the_drain(tmp_path):
    recording(tmp_path / "d", SlowStager(delay=0))
    inkling_probe.step()
    threads = [threading.Thread(target=lambda k=k: [inkling_probe.probe(f"t{k}", torch.full((3,), float(i)))
                                                   for i in range(100)]) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.stop()
    d = inkling_probe.open(tmp_path / "d")
    assert len(d.index) == 300
    assert [float(d.array("t1", 0, call=i)[0]) for i in range(100)] == [float(i) for i in range(100)]


class FakeEvent:
    recorded = 0
    device = torch.device("cuda", 0)

    def __init__(self, blocking=False):
        self.blocking = blocking

    def record(self, stream=None):
        FakeEvent.recorded += 1

    def synchronize(self):
        pass

    def query(self):
        return True


def fake_events(monkeypatch) -> None:
    """CUDA events and the current device replaced (CudaStager's own code runs without a GPU)."""
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_cuda_stager_reuses_pinned_buffers_and_bounds_them(monkeypatch):
    """CudaStager's own code with the device calls replaced: pinned allocation -> plain, event -> fake."""
    real_empty = torch.empty
    allocations = []

    def empty(*a, pin_memory=False, **k):
        allocations.append(pin_memory)
        return real_empty(*a, **k)
    monkeypatch.setattr(torch, "empty", empty)
    fake_events(monkeypatch)
    stager = staging.CudaStager(limit_bytes=64)
    x = torch.arange(8.0)  # 32 bytes
    host, token = stager.stage(x)
    assert torch.equal(host, x) and allocations == [True]
    host2, token2 = stager.stage(x + 1)
    assert torch.equal(host2, x + 1) and allocations == [True, True]
    blocked = threading.Event()

    def third():
        stager.stage(x + 2)  # over the 64-byte limit: waits for a release
        blocked.set()
    t = threading.Thread(target=third)
    t.start()
    time.sleep(0.1)
    assert not blocked.is_set()
    stager.wait(token)
    stager.release(token)
    t.join(5)
    assert blocked.is_set() and allocations == [True, True]  # the released buffer was reused
    assert FakeEvent.recorded == 3


def test_cuda_stager_keeps_at_most_its_limit_of_idle_buffers(monkeypatch):
    """Shapes that never come back (a growing sequence) do not pin host memory for good."""
    fake_events(monkeypatch)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    stager = staging.CudaStager(limit_bytes=1000)
    for n in range(1, 60):
        host, token = stager.stage(torch.ones(n))  # 4n bytes, a new shape each time
        stager.release(token)
    assert stager._free_bytes <= 1000 and stager._outstanding == 0
    assert (torch.float32, (59,)) in stager._free  # the most recent shapes are kept
    assert (torch.float32, (1,)) not in stager._free


def test_cuda_stager_keeps_bf16_two_bytes_a_value(monkeypatch):
    """bf16 is copied to the host as itself (the store keeps its bits): no widening pass anywhere,
    every bit pattern back exact, NaNs too."""
    import numpy as np

    from inkling_probe.store.dtypes import decode, encode

    fake_events(monkeypatch)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)  # every bf16 bit pattern
    host, token = staging.CudaStager().stage(bits.view(torch.bfloat16))
    assert host.dtype == torch.bfloat16
    array, storage = encode(host, "bfloat16")
    assert storage == "native" and array.dtype == np.uint16
    assert np.array_equal(array, bits.numpy().view(np.uint16))
    assert torch.equal(decode(array, "bfloat16").view(torch.int16), bits)


def test_recorder_sends_cuda_tensors_through_the_drain(tmp_path, monkeypatch):
    """A tensor reporting is_cuda takes the staged path; the recording thread never copies it."""
    rec = Recorder(settings.make(tmp_path / "d", writer="inline"))
    calls = []
    monkeypatch.setattr(Recorder, "_staged", lambda self, row, t: calls.append(row["key"]))

    class FakeCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    rec.record("x", torch.ones(2).as_subclass(FakeCuda))
    rec.record("y", torch.ones(2))
    rec.close()
    assert calls == ["x"] and inkling_probe.open(tmp_path / "d").keys() == ["y"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("writer", ["inline", "process"])
def test_on_gpu_staged_copies_keep_the_value_at_probe_time(tmp_path, writer):
    """Real pinned buffers and events: a tensor overwritten in place right after its probe, and a
    slice (non-contiguous source), read back bit-exact; bf16 too; with either writer (the process
    writer's copies land in its shared ring)."""
    with inkling_probe.recording(tmp_path / "d", writer=writer, tokens="0:3"):
        for s in range(3):
            inkling_probe.step()
            x = torch.zeros(1024, 256, device="cuda")
            for i in range(10):
                x.add_(1)
                inkling_probe.probe("x", x)
                inkling_probe.probe("cols", x[:, 100:110].bfloat16(), token_dim=0)
    d = inkling_probe.open(tmp_path / "d")
    for s in range(3):
        for i in range(10):
            assert bool((d.tensor("x", s, call=i)[:3] == i + 1).all())
            got = d.tensor("cols", s, call=i)
            assert got.dtype == torch.bfloat16 and tuple(got.shape) == (3, 10) and bool((got == i + 1).all())


# -- batches: float32/bf16 tensors gathered into one buffer, statistics computed there ---------------
def batched_recording(path, monkeypatch, capacity=4096, writer="inline", device_stats=True, **kw):
    """The real CudaStager, StepBatch and Drain on CPU tensors (events and pinning stood in for);
    ``device_stats``: every batch's statistics from row_stats (else small ones from the writer)."""
    if device_stats:
        monkeypatch.setattr(step_batch, "DEVICE_STATS_MIN", 0)
    monkeypatch.setattr(step_batch, "ROW", 16)  # several tensors a batch, several rows a tensor
    fake_events(monkeypatch)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    sink.start(settings.make(path, writer=writer, **kw))
    rec = sink.active_recorder()
    stager = staging.CudaStager()
    rec._stager = stager
    batch = step_batch.StepBatch(stager, capacity=capacity, stats=rec.settings.mode != "hash")
    rec._drain = Drain(stager, rec._host_writer, batch)
    return rec, stager


def mixed_probes(step):
    """fp32 and bf16 (NaN, inf, huge values), an int tensor between them, an empty one, one larger
    than half the batch, and a buffer changed in place right after its probe."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 32, generator=g)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    inkling_probe.probe("a", x)
    x.mul_(100)  # the probe kept the value it had
    inkling_probe.probe("b", (torch.randn(8, 40, generator=g) * 3e30).bfloat16())
    inkling_probe.probe("ids", torch.arange(7))
    inkling_probe.probe("c", torch.randn(4, 8, 9, generator=g)[:, 2:5])  # a non-contiguous view
    h = torch.randn(6, 8, generator=g)
    inkling_probe.probe("h", h)
    inkling_probe.probe("h_heads", h.view(6, 2, 4))  # a reshaped view: a reference sent while h is in a batch
    inkling_probe.probe("empty", torch.zeros(0, 3))
    inkling_probe.probe("big", torch.randn(3000, generator=g))  # > capacity / 2: staged alone
    inkling_probe.probe("all_nan", torch.full((5,), float("nan")))
    for i in range(40):  # several seals within the step (capacity 4096 floats)
        inkling_probe.probe("loop", torch.full((200,), float(i)).bfloat16() if i % 2 else torch.full((200,), float(i)))


@pytest.mark.parametrize("writer,device_stats", [("inline", True), ("process", True), ("process-ring", True),
                                                 ("process", False)])
def test_batched_tensors_read_back_bit_exact_with_the_stats_the_host_would_compute(tmp_path, monkeypatch, writer,
                                                                                    device_stats):
    """A batch goes to the writer in one call (one message to a writer process, through the pipe or
    the shared ring, split there); its statistics come from the device, or for a small batch
    (``device_stats`` False: all of these) from the writer."""
    from inkling_probe.store import writer_process
    from inkling_probe.store.stats import array_stats

    if writer == "process-ring":
        monkeypatch.setattr(writer_process, "_RING_MIN_BYTES", 0)  # these small batches too

    sink.start(settings.make(tmp_path / "plain", writer="inline"))
    for step in range(2):
        inkling_probe.step()
        mixed_probes(step)
    sink.stop()
    rec, stager = batched_recording(tmp_path / "batched", monkeypatch, writer=writer.split("-")[0],
                                    device_stats=device_stats)
    for step in range(2):
        inkling_probe.step()
        mixed_probes(step)
    sink.stop()
    plain, batched = inkling_probe.open(tmp_path / "plain"), inkling_probe.open(tmp_path / "batched")
    assert [(r["key"], r["step"], r["call"], r["seq"]) for r in batched.index] == \
        [(r["key"], r["step"], r["call"], r["seq"]) for r in plain.index]  # probe order kept
    for rp, rb in zip(plain.index, batched.index):
        assert rp["hash"] == rb["hash"], rb["key"]  # the same stored bytes
        assert (rp["nan"], rp["inf"]) == (rb["nan"], rb["inf"]), rb["key"]
        for k in ("mean", "rms", "absmax"):
            if np.isnan(rp[k]):
                assert np.isnan(rb[k]), (rb["key"], k)
            else:
                assert rb[k] == pytest.approx(rp[k], rel=1e-5, abs=1e-30), (rb["key"], k)
    heads = [r for r in batched.index if r["key"] == "h_heads"]
    assert heads and all(r["ref"] == "h" and r["shape"] == (6, 2, 4) for r in heads)
    np.testing.assert_array_equal(batched.array("h_heads", 1), plain.array("h_heads", 1))
    a = batched.array("a", 1)
    assert a.shape == (16, 32) and np.isnan(a[0, 0]) and abs(float(a[1, 1])) < 10  # before the mul_
    st = array_stats(batched.array("c", 0), "native")
    assert batched.index[[r["key"] for r in batched.index].index("c")]["mean"] == pytest.approx(st["mean"], rel=1e-5)
    assert stager._outstanding == 0  # every pinned buffer came back


def test_a_float_tensor_too_large_for_the_buffer_is_a_batch_of_its_own(tmp_path, monkeypatch):
    """fp32/bf16 larger than half the buffer (the logits) still get their statistics on the device
    and one hand-over: never the one-by-one path; past the buffer's capacity (device memory for the
    copy and its statistics) they take the one-by-one path."""
    rec, stager = batched_recording(tmp_path / "d", monkeypatch, capacity=4096)
    alone = []
    real_stage = stager.stage

    def stage(t):
        alone.append(t.numel())
        return real_stage(t)
    monkeypatch.setattr(stager, "stage", stage)
    big = torch.randn(3000, generator=torch.Generator().manual_seed(0)).bfloat16()
    big[7] = float("nan")
    inkling_probe.probe("big", big)
    huge = torch.zeros(4097, dtype=torch.bfloat16)  # capacity 4096
    inkling_probe.probe("huge", huge)
    sink.stop()
    d = inkling_probe.open(tmp_path / "d")
    assert alone == [huge.numel()]
    assert torch.equal(d.tensor("big").view(torch.int16), big.view(torch.int16))
    row = d.rows("big")[0]
    finite = big.float()[~torch.isnan(big.float())].double()
    # float32 sums: the mean of values ~1 is good to ~1e-6 of their size, not of a mean near 0
    # (unseeded, 1 run in a few hundred missed a relative 1e-6)
    assert row["nan"] == 1 and row["mean"] == pytest.approx(finite.mean().item(), abs=1e-6)


def test_a_batch_pins_a_host_buffer_sized_to_it(tmp_path, monkeypatch):
    """With a large device buffer, small batches take power-of-two host buffers (64K values and up),
    not the whole capacity; what they carry reads back bit-exact."""
    assert [staging._bucket(n, 1 << 23) for n in (1, 65536, 65537, 300_000, 1 << 23)] == \
        [1 << 16, 1 << 16, 1 << 17, 1 << 19, 1 << 23]
    assert staging._bucket(5000, 4096) == 4096
    rec, stager = batched_recording(tmp_path / "d", monkeypatch, capacity=1 << 20)
    taken = []
    real_take = stager.take
    monkeypatch.setattr(stager, "take", lambda dtype, shape, wait=True: taken.append(shape) or real_take(dtype, shape, wait))
    want = {f"t{i}": torch.randn(100 * (i + 1)).bfloat16() for i in range(5)}
    for name, t in want.items():
        inkling_probe.probe(name, t)
    sink.stop()
    d = inkling_probe.open(tmp_path / "d")
    for name, t in want.items():
        assert torch.equal(d.tensor(name).view(torch.int16), t.view(torch.int16))
    assert (1 << 16,) in taken and (1 << 20,) not in taken


def test_batches_in_hash_mode_skip_statistics(tmp_path, monkeypatch):
    batched_recording(tmp_path / "d", monkeypatch, mode="hash")
    inkling_probe.probe("x", torch.ones(10))
    sink.stop()
    row = inkling_probe.open(tmp_path / "d").index[0]
    assert (row["nan"], row["inf"]) == (-1, -1) and len(row["hash"]) == 16


def test_a_batch_write_failure_surfaces_and_gives_every_buffer_back(tmp_path, monkeypatch):
    from inkling_probe.store import diskio
    from inkling_probe.store.writer import SegmentWriter

    rec, stager = batched_recording(tmp_path / "d", monkeypatch)
    inkling_probe.probe("ok", torch.ones(4))
    inkling_probe.step()

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(SegmentWriter, "_add", full)  # a tensor alone
    monkeypatch.setattr(diskio, "_pwritev_all", full)  # a batch's pack part
    for i in range(5):
        inkling_probe.probe("x", torch.ones(4))
    with pytest.raises(DumpError) as e:
        inkling_probe.step()
    assert "disk full" in str(e.value) and "\n" not in str(e.value)
    sink.stop()
    assert stager._outstanding == 0
    assert inkling_probe.open(tmp_path / "d").keys() == ["ok"]


# -- the ring stager: copies straight into the writer process's shared ring ---------------------
def ring_recording(path, monkeypatch, ring_bytes=64 << 10, threaded=True):
    """A process-writer recording whose drain stages into the writer's ring (RingStager), on CPU
    tensors: registration and events stood in for, a small ring so it wraps and fills; ``threaded``:
    a drain thread hands over (else the recording thread, as the recorder sets it up for this writer)."""
    from inkling_probe.store import writer_process

    monkeypatch.setattr(writer_process, "_RING_BYTES", ring_bytes)
    monkeypatch.setattr(step_batch, "ROW", 16)
    monkeypatch.setattr(step_batch, "DEVICE_STATS_MIN", 0)
    fake_events(monkeypatch)
    registered = []
    monkeypatch.setattr(staging, "_host_register", lambda address, n: registered.append((address, n)))
    monkeypatch.setattr(staging, "_host_unregister", lambda address: registered.remove(
        next(r for r in registered if r[0] == address)))
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    sink.start(settings.make(path, writer="process"))
    inkling_probe.probe("first", torch.ones(3))  # opens the writer (a CPU tensor: through the pipe)
    rec = sink.active_recorder()
    stager = rec._device_stager()
    assert isinstance(stager, staging.RingStager) and registered == [(stager.ring.address(), stager.ring.mapped_bytes())]
    stager.min_bytes = 1  # these small tensors too
    rec._stager = stager
    rec._drain = Drain(stager, rec._host_writer, step_batch.StepBatch(stager, capacity=2048), threaded=threaded)
    return rec, stager, registered


@pytest.mark.parametrize("threaded", [True, False], ids=["drain thread", "recording thread"])
def test_ring_staging_reads_back_what_the_cpu_path_stores_and_copies_nothing_on_the_host(tmp_path, monkeypatch,
                                                                                        threaded):
    """Batches and single tensors are copied into ring slots and sent by position: no ring.put (the
    host copy it replaces), the ring wraps and fills (the recording thread waits for the writer),
    and every tensor reads back with the hash and statistics of a plain CPU recording."""
    from inkling_probe.store import ring

    sink.start(settings.make(tmp_path / "plain", writer="inline"))
    inkling_probe.probe("first", torch.ones(3))
    for step in range(4):
        inkling_probe.step()
        mixed_probes(step)
    sink.stop()

    def no_put(*a, **k):
        raise AssertionError("a payload was copied into the ring")
    monkeypatch.setattr(ring.RingWriter, "put", no_put)
    rec, stager, registered = ring_recording(tmp_path / "ring", monkeypatch, ring_bytes=16 << 10, threaded=threaded)
    stager.wait = lambda token: time.sleep(0.002)  # copies complete late: taken slots pile up, the ring fills
    stager.ready = lambda token: False  # (without a drain thread: handed over only when the ring is full)
    ring_writer = stager.ring
    waited = []
    real_wait = stager._wait
    stager._wait = lambda: waited.append(1) or real_wait()
    for step in range(4):
        inkling_probe.step()
        mixed_probes(step)
    sink.stop()
    assert ring_writer.head > 2 * ring_writer.size and waited  # wrapped, and filled up at least once
    assert registered == [] and not ring_writer._placed  # unregistered at close; every slot was sent
    plain, staged = inkling_probe.open(tmp_path / "plain"), inkling_probe.open(tmp_path / "ring")
    assert [(r["key"], r["step"], r["call"]) for r in staged.index] == [(r["key"], r["step"], r["call"]) for r in plain.index]
    for rp, rs in zip(plain.index, staged.index):
        assert (rp["hash"], rp["nan"], rp["inf"]) == (rs["hash"], rs["nan"], rs["inf"]), rs["key"]
        for k in ("mean", "rms", "absmax"):
            assert (np.isnan(rp[k]) and np.isnan(rs[k])) or rs[k] == pytest.approx(rp[k], rel=1e-5, abs=1e-30)
    assert stager._outstanding == 0


def test_ring_staging_keeps_8bit_floats_and_small_tensors_in_pooled_buffers(tmp_path, monkeypatch):
    rec, stager, _ = ring_recording(tmp_path / "d", monkeypatch)
    stager.min_bytes = 64
    slots = []
    real_slot = stager.ring.slot
    monkeypatch.setattr(stager.ring, "slot", lambda n, wait: slots.append(n) or real_slot(n, wait))
    fp8 = torch.randn(100).to(torch.float8_e4m3fn)
    inkling_probe.probe("fp8", fp8)  # stored upcast: encode makes a new array, so not a slot
    inkling_probe.probe("tiny", torch.arange(3))  # 24 bytes < min_bytes
    inkling_probe.probe("ids", torch.arange(100))  # 800 bytes: a slot
    sink.stop()
    assert slots == [800]
    d = inkling_probe.open(tmp_path / "d")
    assert torch.equal(d.tensor("fp8").view(torch.uint8), fp8.view(torch.uint8))
    assert d.tensor("tiny").tolist() == [0, 1, 2] and torch.equal(d.tensor("ids"), torch.arange(100))


def test_the_recording_thread_hands_over_finished_copies_at_probes_and_the_rest_at_step(tmp_path, monkeypatch):
    """Without a drain thread (the process writer): a probe hands over the queued items whose copies
    have finished, in order, and stops at the first unfinished one; step() hands over the rest."""
    rec, stager, _ = ring_recording(tmp_path / "d", monkeypatch, ring_bytes=1 << 20, threaded=False)
    assert not any(t.name == "inkling-probe-drain" for t in threading.enumerate())
    finished = [0]  # copies that may finish from now on

    def ready(token):
        finished[0] -= 1
        return finished[0] >= 0
    monkeypatch.setattr(stager, "ready", ready)
    inkling_probe.step()
    for i in range(6):
        inkling_probe.probe(f"x{i}", torch.full((1100,), float(i)))  # a batch of its own each (capacity 2048)
    assert len(rec._drain._items) == 6  # none finished: all still queued
    finished[0] = 3
    inkling_probe.probe("y", torch.full((1100,), -1.0))
    assert len(rec._drain._items) == 4  # three handed over, in order; the fourth is not finished
    inkling_probe.step()
    assert not rec._drain._items
    sink.stop()
    d = inkling_probe.open(tmp_path / "d")
    assert d.complete_through_step() == 1
    assert [float(d.array(f"x{i}", 1)[0]) for i in range(6)] == [float(i) for i in range(6)]
    assert float(d.array("y", 1)[0]) == -1.0


def test_a_refused_registration_stages_through_pooled_buffers_with_one_warning(tmp_path, monkeypatch, capfd):
    def refuse(address, n):
        raise OSError("cudaHostRegister of the writer's ring failed (CUDA error 1)")
    monkeypatch.setattr(staging, "_host_register", refuse)
    sink.start(settings.make(tmp_path / "d", writer="process"))
    inkling_probe.probe("first", torch.ones(3))
    rec = sink.active_recorder()
    stager = rec._device_stager()
    assert not rec._writer._ring_claimed  # refused: large payloads still go through the ring
    sink.stop()
    assert type(stager) is staging.CudaStager
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines == ["inkling-probe: cudaHostRegister of the writer's ring failed (CUDA error 1); staging through "
                     "pinned buffers (slower)"]


@pytest.mark.parametrize("threaded", [True, False], ids=["drain thread", "recording thread"])
def test_a_slot_taken_when_ctrl_c_comes_is_freed_and_recording_goes_on(tmp_path, monkeypatch, threaded):
    """A KeyboardInterrupt between taking a ring slot and queueing it (here: while the batch's event
    is recorded) must not leave the slot taken for ever: the writer frees it, later steps are whole
    (the ring is large enough here that a leaked slot fails the tail check instead of hanging)."""
    rec, stager, _ = ring_recording(tmp_path / "d", monkeypatch, ring_bytes=1 << 20, threaded=threaded)
    real_record, calls = stager.record, []

    def record():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_record()
    monkeypatch.setattr(stager, "record", record)
    inkling_probe.step()
    with pytest.raises(KeyboardInterrupt):
        for i in range(10):
            inkling_probe.probe(f"x{i}", torch.full((1100,), float(i)))  # a batch of its own each (capacity 2048)
    for step in range(2):
        inkling_probe.step()
        mixed_probes(step)
    inkling_probe.step()
    ring_writer = stager.ring
    assert ring_writer.tail() == ring_writer.head and not ring_writer._placed  # every slot freed
    sink.stop()
    d = inkling_probe.open(tmp_path / "d")
    assert d.complete_through_step() == 3 and d.tensor("all_nan", 3).isnan().all()


def test_an_interrupted_wait_for_ring_space_takes_nothing(tmp_path):
    """Ctrl-C while waiting for the writer at the ring's wrap: the skipped end is not taken either."""
    from inkling_probe.store import ring

    fd = ring.ring_file(lambda text: None)
    os.posix_fallocate(fd, 0, ring._HEADER + 1024)
    w = ring.RingWriter(fd, 1024)
    w.placed(w.slot(640, wait=lambda: None))

    def interrupted():
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        w.slot(512, interrupted)  # would skip [640, 1024) and wait for the tail
    assert w.head == 640 and len(w._placed) == 0
    w.close()


def test_a_wait_for_ring_space_ends_when_the_drain_has_failed():
    """A full ring is freed by the writer as the drain sends what it holds; if the drain failed, that
    never comes: the recording thread's wait raises the drain's failure instead of hanging."""
    class FullRing:
        size = 1 << 20

        def address(self):
            return 0

        def mapped_bytes(self):
            return 0

        def slot(self, n, wait):
            while True:
                wait()

    real_register = staging._host_register
    staging._host_register = lambda address, n: None
    try:
        stager = staging.RingStager(FullRing(), wait=lambda: None)
    finally:
        staging._host_register = real_register
    failure = DumpError("recording 'x' (step 0) in d: no space left on the device (disk full)")

    class FailedDrain:
        def relieve(self):
            pass

        def cancelled(self):
            return failure
    stager.drained_by(FailedDrain())
    with pytest.raises(DumpError) as e:
        stager.batch_host(torch.float32, 1 << 16, 1 << 20)
    assert e.value is failure


@pytest.mark.parametrize("row", [1, 4, 16], ids=["rows of 1", "rows of 4", "rows of 16"])
def test_row_statistics_add_up_to_each_tensors_statistics(monkeypatch, row):
    """Tensors at row starts in a zero-padded buffer (as StepBatch lays them out): row_stats then
    sums_from_rows give the host's statistics; a tensor with a NaN or an infinity is marked (NaN
    sum) for the writer, its neighbours are not."""
    from inkling_probe.store.batch import sums_from_rows
    from inkling_probe.store.stats import array_stats, summary_from_sums

    monkeypatch.setattr(step_batch, "ROW", row)
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(100, generator=g), torch.tensor([float("nan"), 1.0, -3.0]), torch.tensor([-7.0]),
             torch.tensor([float("inf")] * 4), torch.randn(1, generator=g) * 1e38, torch.tensor([-2.5e38, 3e38]),
             torch.randn(33, generator=g) - 5, torch.tensor([float("nan")] * 9 + [-7.0] + [float("-inf")] * 5)]
    spans, at = [], 0
    for p in parts:
        spans.append((at, p.numel(), tuple(p.shape)))
        at = step_batch._aligned(at + p.numel())
    buffer = torch.zeros(at)
    for (offset, n, _), p in zip(spans, parts):
        buffer[offset: offset + n] = p
    rows = step_batch.row_stats(buffer.view(-1, row))
    assert tuple(rows.shape) == (4, at // row) and rows.dtype is torch.float64
    sums = sums_from_rows(rows.numpy(), spans, row)
    assert tuple(sums.shape) == (len(parts), 5)
    for p, s in zip(parts, sums):
        want = array_stats(p.numpy(), "native")
        if want["nan"] or want["inf"]:
            assert np.isnan(s[0]), p
            continue
        got = summary_from_sums(p.numel(), *s)
        assert (got["nan"], got["inf"]) == (0, 0)
        for k in ("mean", "rms", "absmax"):
            assert got[k] == pytest.approx(want[k], rel=1e-6), (p, k)


def test_the_batch_buffer_puts_each_tensor_at_a_row_start_with_zeros_between(monkeypatch):
    monkeypatch.setattr(step_batch, "ROW", 8)
    fake_events(monkeypatch)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    batch = step_batch.StepBatch(staging.CudaStager(), capacity=64)
    a, b = torch.arange(1.0, 4.0), torch.arange(1.0, 19.0).view(3, 6)[:, 1:5]  # b: a non-contiguous view
    batch.append({"key": "a"}, a)
    assert batch.fits(b) and batch._used == 8
    batch.append({"key": "b"}, b)
    assert not batch.fits(torch.ones(49))  # 16 used, 48 left
    rows, host, token, spans, stats = batch.seal()
    assert spans == [(0, 3, (3,)), (8, 12, (3, 4))]
    assert host[:24].tolist() == [1, 2, 3, 0, 0, 0, 0, 0] + b.reshape(-1).tolist() + [0] * 4
    assert stats is None  # 24 values < DEVICE_STATS_MIN: the writer computes them


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("writer", ["inline", "process"])
def test_on_gpu_batches_store_what_the_cpu_path_stores(tmp_path, writer):
    """The same tensors probed from the GPU (batched, row statistics on the device in float64, one
    on a side stream, a large one as a batch of its own, one too large for a batch; with the process
    writer copied straight into its ring, registered as pinned memory) and from the CPU (float32
    accumulation): equal hashes, equal NaN/Inf counts, statistics within 1e-5 of the tensor's scale."""
    g = torch.Generator().manual_seed(0)
    with_nan = torch.randn(300_000, generator=g).bfloat16()
    with_nan[12345] = float("nan")
    tensors = [torch.randn(64, 48, generator=g), (torch.randn(300, generator=g) * 1e30).bfloat16(),
               torch.tensor([float("nan"), float("inf"), 2.0, -float("inf")]), torch.arange(5),
               torch.randn(512, 256, generator=g).bfloat16(), with_nan, torch.arange(100_000),
               torch.randn(5_000_000, generator=g),  # > half a batch: a batch of its own
               torch.randn(9_000_000, generator=g)]  # > a batch: staged alone
    side = torch.cuda.Stream()
    for where in ("cpu", "cuda"):
        with inkling_probe.recording(tmp_path / where, writer=writer):
            for s in range(2):
                inkling_probe.step()
                for i, t in enumerate(tensors):
                    inkling_probe.probe(f"t{i}", t.to(where))
                with torch.cuda.stream(side):
                    inkling_probe.probe("side", tensors[0].to(where) * 2)
            if where == "cuda" and writer == "process":
                stager = sink.active_recorder()._drain.stager
                assert isinstance(stager, staging.RingStager)
                assert torch.from_numpy(stager.ring._data[:64]).is_pinned()
    a, b = inkling_probe.open(tmp_path / "cpu"), inkling_probe.open(tmp_path / "cuda")
    assert len(a.index) == len(b.index) == 2 * (len(tensors) + 1)
    for ra, rb in zip(a.index, b.index):
        assert (ra["key"], ra["hash"], ra["nan"], ra["inf"]) == (rb["key"], rb["hash"], rb["nan"], rb["inf"])
        for k in ("mean", "rms", "absmax"):  # a mean near 0 is as exact as the sum: relative to the rms
            assert (np.isnan(ra[k]) and np.isnan(rb[k])) or rb[k] == pytest.approx(ra[k], rel=1e-5, abs=1e-5 * ra["rms"])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("writer", ["inline", "process"])
def test_a_batch_sealed_from_another_stream_waits_for_its_own_copies(tmp_path, writer):
    """A batch is sealed when the next probe runs on another stream, or by a step() called from
    another stream. Its copy to the host must wait for the copies queued on the batch's own stream
    (busy here behind a long kernel), not for the current stream's: else the dump holds what the
    buffer held before (found in review)."""
    x = torch.randn(256, 1024, device="cuda")
    want = x.cpu() * 3
    side = torch.cuda.Stream()
    with inkling_probe.recording(tmp_path / "d", writer=writer):
        inkling_probe.step()
        torch.cuda.synchronize()
        torch.cuda._sleep(500_000_000)  # the default stream busy for a while
        inkling_probe.probe("late", x * 3)  # produced and appended behind the sleep
        with torch.cuda.stream(side):
            inkling_probe.probe("side", torch.ones(8, device="cuda"))
            inkling_probe.step()  # seals every open batch with the side stream current
            torch.cuda._sleep(500_000_000)
            inkling_probe.probe("late", x * 3)  # a batch of the side stream's, sealed from the default
        inkling_probe.step()
    d = inkling_probe.open(tmp_path / "d")
    for s in (0, 1):
        assert np.array_equal(np.asarray(d.array("late", s)), want.numpy()), s
    assert np.array_equal(np.asarray(d.array("side", 0)), np.ones(8, np.float32))


"""The asynchronous device-to-host path (staging.py), run on CPU: the real queue, drain thread and
pinned-buffer pool, with the device parts (copy engine, events, pinned allocation) stood in for."""
import threading
import time

import pytest
import torch

import inkling_probe
from inkling_probe import settings, sink, staging
from inkling_probe.errors import DumpError
from inkling_probe.recorder import Recorder


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

    def record(self):
        FakeEvent.recorded += 1

    def synchronize(self):
        pass


def test_cuda_stager_reuses_pinned_buffers_and_bounds_them(monkeypatch):
    """CudaStager's own code with the device calls replaced: pinned allocation -> plain, event -> fake."""
    real_empty = torch.empty
    allocations = []

    def empty(*a, pin_memory=False, **k):
        allocations.append(pin_memory)
        return real_empty(*a, **k)
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
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
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    stager = staging.CudaStager(limit_bytes=1000)
    for n in range(1, 60):
        host, token = stager.stage(torch.ones(n))  # 4n bytes, a new shape each time
        stager.release(token)
    assert stager._free_bytes <= 1000 and stager._outstanding == 0
    assert (torch.float32, (59,)) in stager._free  # the most recent shapes are kept
    assert (torch.float32, (1,)) not in stager._free


def test_cuda_stager_widens_bf16_to_its_exact_float32(monkeypatch):
    """bf16 is widened on the device (one kernel) so the host does no pass: bits << 16, NaNs too."""
    import numpy as np

    from inkling_probe.store.dtypes import decode, encode

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)  # every bf16 bit pattern
    host, token = staging.CudaStager().stage(bits.view(torch.bfloat16))
    assert host.dtype == torch.float32
    array, storage = encode(host, "bfloat16")
    assert storage == "upcast"
    assert np.array_equal(array.view(np.uint32), bits.numpy().view(np.uint16).astype(np.uint32) << 16)
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
def test_on_gpu_staged_copies_keep_the_value_at_probe_time(tmp_path):
    """Real pinned buffers and events: a tensor overwritten in place right after its probe, and a
    slice (non-contiguous source), read back bit-exact; bf16 too."""
    with inkling_probe.recording(tmp_path / "d", writer="inline", tokens="0:3"):
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

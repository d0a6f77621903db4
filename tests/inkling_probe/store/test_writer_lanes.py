"""A step's large writes spread over two segment files (lanes), so two job threads write at once:
every tensor reads back bit-exact wherever it went, the main lane carries the step's completion
mark and is renamed last, and a writer stopped between the renames leaves the step marked
incomplete, as a segment split by size does."""
import h5py
import numpy as np
import pytest

import inkling_probe
from inkling_probe.errors import DumpError, SettingsError
from inkling_probe.settings import from_env
from inkling_probe.store import schema, writer as writer_module
from inkling_probe.store.stats import content_hash
from inkling_probe.store.writer import SegmentWriter, default_lanes

RUN = "0123456789ab"
MIB = 1 << 20


def row(key, array, step, seq):
    return {"key": key, "step": step, "seq": seq, "call": 0, "rank": 0, "shape": schema.shape_text(array.shape),
            "dtype": "float32", "storage": "native", "shard": "replicated", "dim": -1, "token_dim": -1,
            "token_start": 0, "numel": array.size, "meta": ""}


def step_tensors(step):
    """~27 MB: a small tensor (packed), eight 1 MiB and four 3 MiB tensors (own datasets), a 4 MiB one."""
    rng = np.random.default_rng(step)
    sizes = [7] + [MIB // 4] * 8 + [3 * MIB // 4] * 4 + [MIB]
    return [rng.standard_normal(n).astype(np.float32) for n in sizes]


def record_steps(path, steps, lanes, workers=2, batched=False):
    w = SegmentWriter(path, 0, 1, run_id=RUN, workers=workers, lanes=lanes)
    seq = 0
    for step in range(steps):
        arrays = step_tensors(step)
        if batched:  # as GPU staging hands them over: one flat buffer, spans at multiples of 4096
            spans, at = [], 0
            for a in arrays:
                spans.append((at, a.size, a.shape))
                at += -(-a.size // 4096) * 4096
            flat = np.zeros(at, np.float32)
            for (offset, n, _), a in zip(spans, arrays):
                flat[offset: offset + n] = a
            rows = [row(f"t{i}", a, step, seq + i) for i, a in enumerate(arrays)]
            w.add_batch(rows, flat, spans, None)
        else:
            for i, a in enumerate(arrays):
                w.add(row(f"t{i}", a, step, seq + i), a)
        seq += len(arrays)
        w.end_segment(complete_through_step=step)
    w.close(complete_through_step=steps - 1)
    return w


def marks(path):
    out = []
    for name in sorted(n for n in (p.name for p in path.iterdir()) if schema.SEGMENT_RE.match(n)):
        with h5py.File(path / name, "r") as f:
            out.append((int(f.attrs["segment"]), int(f.attrs["complete_through_step"]), len(f["index"])))
    return out


@pytest.mark.parametrize("batched", [False, True])
def test_two_lanes_split_a_step_s_large_writes_and_every_tensor_reads_back(tmp_path, batched):
    record_steps(tmp_path, 3, lanes=2, batched=batched)
    got = marks(tmp_path)
    assert len(got) == 6  # two files a step
    # each step: a side lane marked complete through the step before, then the main lane with it;
    # numbered in the order they were opened (main first), renamed side first
    by_step = [sorted(got[2 * s: 2 * s + 2]) for s in range(3)]
    for step, (main, side) in enumerate(by_step):
        assert main[1] == step and side[1] == step - 1
        assert main[2] > 0 and side[2] > 0  # both hold tensors of the step
    d = inkling_probe.open(tmp_path)
    assert d.complete_through_step() == 2
    for step in range(3):
        for i, a in enumerate(step_tensors(step)):
            assert np.array_equal(d.array(f"t{i}", step), a)
            r = next(r for r in d.index if r["key"] == f"t{i}" and r["step"] == step)
            assert r["hash"] == content_hash(a, "float32", a.shape)
    assert [r["seq"] for r in d.index] == sorted(r["seq"] for r in d.index)  # read in probe order
    stored = [tensor_bytes(p) for p in sorted(tmp_path.glob("*.h5"))]
    assert min(stored) > 0.25 * max(stored)  # the large writes are shared out


def tensor_bytes(path) -> int:
    """Bytes of tensor data in one segment file (every dataset but the index)."""
    sizes = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: sizes.append(obj.id.get_storage_size())
                     if isinstance(obj, h5py.Dataset) and name != "index" else None)
    return sum(sizes)


def test_one_lane_writes_one_file_a_step(tmp_path):
    record_steps(tmp_path, 2, lanes=1)
    assert [m[:2] for m in marks(tmp_path)] == [(0, 0), (1, 1)]


def test_a_small_step_stays_in_one_file(tmp_path):
    w = SegmentWriter(tmp_path, 0, 1, run_id=RUN, workers=2, lanes=2)
    a = np.arange(3 * MIB // 4, dtype=np.float32)  # 3 MiB, under the 8 MiB a second lane waits for
    w.add(row("x", a, 0, 0), a)
    w.close(complete_through_step=0)
    assert len(marks(tmp_path)) == 1


def test_stopped_between_the_renames_the_step_reads_as_incomplete(tmp_path, monkeypatch):
    """Step 0 whole; step 1's side lane renamed, then the main lane's close fails: step 1's
    tensors in the side lane read back, and the dump says complete through step 0."""
    w = SegmentWriter(tmp_path, 0, 1, run_id=RUN, workers=2, lanes=2)
    for step in range(2):
        for i, a in enumerate(step_tensors(step)):
            w.add(row(f"t{i}", a, step, 100 * step + i), a)
        if step == 0:
            w.end_segment(complete_through_step=0)
    real = writer_module._close_lane

    def fail_on_main(lane, mark):
        if mark == 1:
            raise OSError(28, "No space left on device")
        real(lane, mark)

    monkeypatch.setattr(writer_module, "_close_lane", fail_on_main)
    with pytest.raises(DumpError, match="disk full"):
        w.end_segment(complete_through_step=1)
    d = inkling_probe.open(tmp_path)
    assert d.complete_through_step() == 0
    step1 = {r["key"] for r in d.index if r["step"] == 1}
    assert step1 and len(step1) < len(step_tensors(1))  # the side lane's share only
    for key in step1:
        i = int(key[1:])
        assert np.array_equal(d.array(key, 1), step_tensors(1)[i])


def test_lanes_default_to_two_with_two_writer_threads_and_are_set_by_the_environment():
    assert default_lanes(0) == 1 and default_lanes(1) == 1 and default_lanes(2) == 2 and default_lanes(4) == 2
    assert from_env({"INKLING_PROBE": "/tmp/x", "INKLING_PROBE_WRITER_LANES": "1"}).writer_lanes == 1
    assert from_env({"INKLING_PROBE": "/tmp/x", "INKLING_PROBE_WRITER_LANES": "auto"}).writer_lanes is None
    with pytest.raises(SettingsError, match="INKLING_PROBE_WRITER_LANES='0'"):
        from_env({"INKLING_PROBE": "/tmp/x", "INKLING_PROBE_WRITER_LANES": "0"})

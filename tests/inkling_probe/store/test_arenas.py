"""Large tensors in arenas from the second step on (store/arenas.py): sized from the step before,
read back bit for bit, datasets of their own where a step differs."""
import h5py
import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store.arenas import ARENA_BYTES, ArenaPlan

MB = 1 << 20


def test_plan_fits_the_last_steps_tensors_in_order():
    plan = ArenaPlan()
    sizes = [2 * MB, 2 * MB, 3 * MB, 5 * MB, 9 * MB, MB]
    for n in sizes:  # step 0: nothing known yet
        assert plan.capacity(0, "float32", n) == 0
        plan.seen(0, "float32", n)
    assert plan.capacity(1, "float32", 2 * MB) == 7 * MB  # 2 + 2 + 3; 5 more would pass 8
    for n in sizes[:3]:
        plan.seen(1, "float32", n)
    assert plan.capacity(1, "float32", 5 * MB) == 0  # alone in an arena: no gain, its own dataset
    plan.seen(1, "float32", 5 * MB)
    assert plan.capacity(1, "float32", 9 * MB) == 0  # past ARENA_BYTES
    plan.seen(1, "float32", 9 * MB)
    assert plan.capacity(1, "float32", MB) == 0  # the last one: nothing left to share with
    assert plan.capacity(1, "bfloat16", 2 * MB) == 0  # a stored type the last step had none of


def test_plan_stops_where_a_step_differs():
    plan = ArenaPlan()
    for n in (MB, MB, MB):
        plan.seen(0, "float32", n)
    assert plan.capacity(1, "float32", 2 * MB) == 0  # another size at this place
    plan.seen(1, "float32", 2 * MB)
    assert plan.capacity(1, "float32", MB) == 2 * MB  # in step again from here: the two left
    plan.seen(1, "float32", MB)
    plan.seen(1, "float32", MB)
    plan.seen(1, "float32", MB)  # a tensor more than the step before
    assert plan.capacity(2, "float32", 2 * MB) == 2 * MB + 3 * MB  # step 1's sequence, not step 0's
    assert ARENA_BYTES == 8 * MB


def _datasets(d) -> dict:
    """path -> (shape) of every tensor dataset in the dump's segments."""
    out = {}
    for seg in d.segments:
        with h5py.File(seg.path, "r") as f:
            f.visititems(lambda name, obj: out.__setitem__(name, obj.shape)
                         if isinstance(obj, h5py.Dataset) and name != "index" else None)
    return out


@pytest.mark.parametrize("writer", ["inline", "process"])
def test_repeated_steps_share_exactly_sized_arenas(tmp_path, writer):
    xs = [torch.randn(256, 512) for _ in range(20)] + [torch.randn(256, 1024).bfloat16() for _ in range(6)]
    with inkling_probe.recording(str(tmp_path / "d"), writer=writer):
        for step in range(3):
            for i, x in enumerate(xs):
                inkling_probe.probe(f"t{i}", x + step)
            inkling_probe.step()
    d = inkling_probe.open(str(tmp_path / "d"))
    for step in range(3):
        for i, x in enumerate(xs):
            np.testing.assert_array_equal(d.array(f"t{i}", step), (x + step).float().numpy())
    datasets = _datasets(d)
    assert sum(name.startswith("tensors/0/") for name in datasets) == 26  # step 0: one each
    for step in (1, 2):
        assert not any(name.startswith(f"tensors/{step}/") for name in datasets)
        parts = {name: shape for name, shape in datasets.items() if name.startswith(f"packs/{step}/")}
        # 20 x 512 KiB float32 in 8 + 2 MiB, 6 x 512 KiB bf16 in 3 MiB: no unused tail
        assert sorted(parts.values()) == [(524288,), (3 * 262144 * 2,), (2097152,)], parts
        assert sum(r["numel"] for r in d.index if r["step"] == step) == sum(n for (n,) in parts.values())


def test_a_step_unlike_the_one_before_is_stored_whole(tmp_path):
    """Other shapes, fewer and more tensors than the step before: every value read back."""
    mb = (256, 1024)  # 1 MiB of float32
    steps = [[mb] * 8, [mb] * 3 + [(1536, 1024)] + [mb] * 6, [mb] * 2]
    made = {}
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline"):
        for step, shapes in enumerate(steps):
            for i, shape in enumerate(shapes):
                made[step, i] = torch.randn(*shape)
                inkling_probe.probe(f"t{i}", made[step, i])
            inkling_probe.step()
    d = inkling_probe.open(str(tmp_path / "d"))
    for (step, i), x in made.items():
        np.testing.assert_array_equal(d.array(f"t{i}", step), x.numpy())
    datasets = _datasets(d)
    assert datasets["tensors/1/t3"] == (1536, 1024)  # where step 1 left step 0's sequence, past the arena's room
    assert datasets["packs/1/float32.0"] == (8 * 256 * 1024,)  # the others: step 0's eight, then their own
    assert sum(name.startswith("tensors/1/") for name in datasets) == 1 + 2
    # step 2 made room for step 1's first three (the 6 MiB one would pass 8) and used two: a tail no row reads
    assert datasets["packs/2/float32.0"] == (3 * 256 * 1024,)
    assert [r["offset"] for r in d.index if r["step"] == 2] == [0, 256 * 1024]


def test_pack_kb_0_and_gzip_keep_datasets_of_their_own(tmp_path):
    for name, settings in (("nopack", dict(pack_kb=0)), ("gzip", dict(compress="gzip"))):
        with inkling_probe.recording(str(tmp_path / name), writer="inline", **settings):
            for step in range(2):
                for i in range(4):
                    inkling_probe.probe(f"t{i}", torch.full((512, 512), float(i + step)))
                inkling_probe.step()
        d = inkling_probe.open(str(tmp_path / name))
        assert all(r["offset"] == -1 and r["dataset"].startswith("/tensors/") for r in d.index), name


def _counting_fallocate(monkeypatch, code=0):
    """diskio's fallocate replaced by one that records each call's bytes and fails with ``code``;
    the dump's file system taken as a disk (tmpfs skips reserving)."""
    import ctypes

    from inkling_probe.store import diskio, writer

    calls = []

    def fallocate(fd, mode, offset, nbytes):
        calls.append(nbytes)
        ctypes.set_errno(code)
        return -1 if code else 0
    monkeypatch.setattr(diskio, "_FALLOCATE", [fallocate])
    monkeypatch.setattr(writer, "_in_memory", lambda fd: False)
    return calls


def test_an_arenas_blocks_are_reserved_whole_not_tensor_by_tensor(tmp_path, monkeypatch):
    calls = _counting_fallocate(monkeypatch)
    xs = [torch.randn(256, 512) for _ in range(20)]  # 512 KiB each
    per_step = []
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline", writer_threads=0):
        for step in range(3):
            for i, x in enumerate(xs):
                inkling_probe.probe(f"t{i}", x + step)
            inkling_probe.step()
            per_step.append(list(calls))
            calls.clear()
    assert per_step[0] == [512 * 1024] * 20  # step 0: each tensor's own dataset
    for step in (1, 2):  # then one call an arena, its whole size (8 MiB, then the 2 MiB left)
        assert per_step[step] == [8 * MB, 2 * MB], per_step[step]
    d = inkling_probe.open(str(tmp_path / "d"))
    np.testing.assert_array_equal(d.array("t19", 2), (xs[19] + 2).numpy())


def test_a_disk_full_found_reserving_an_arena_is_one_line_naming_the_key(tmp_path, monkeypatch):
    import errno

    calls = _counting_fallocate(monkeypatch)
    root = str(tmp_path / "d")
    with pytest.raises(DumpError) as e:
        with inkling_probe.recording(root, writer="inline", writer_threads=0):
            for step in range(2):
                if step == 1:
                    _counting_fallocate(monkeypatch, errno.ENOSPC)
                for i in range(4):
                    inkling_probe.probe(f"t{i}", torch.full((256, 512), float(i + step)))
                inkling_probe.step()
    assert calls == [512 * 1024] * 4
    text = str(e.value)
    assert text.startswith("recording 't0' (step 1)") and "disk full" in text and "\n" not in text
    d = inkling_probe.open(root)  # step 0 is whole
    np.testing.assert_array_equal(d.array("t3", 0), np.full((256, 512), 3.0, np.float32))

"""A batch's tensors packed into allocated parts (store/writer.py ``add_batch``): one dataset per
part instead of one per tensor, bit-exact, readable with plain h5py by offset, and every tensor's
callback called once, also when the write fails."""
import errno

import h5py
import numpy as np
import pytest

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store import diskio, schema
from inkling_probe.store.stats import array_stats, bf16_bits_to_float32, content_hash
from inkling_probe.store.writer import SegmentWriter


def row(key, shape, dtype="float32", step=0, seq=0):
    return {"key": key, "step": step, "seq": seq, "call": 0, "rank": 0, "shape": schema.shape_text(shape),
            "dtype": dtype, "storage": "native", "shard": "replicated", "dim": -1, "token_dim": -1,
            "token_start": 0, "numel": int(np.prod(shape)), "meta": ""}


def batch(shapes, dtype=np.float32, gap=16, seed=0):
    """(flat buffer, spans) as staging lays a batch out: each tensor at a multiple of ``gap`` values."""
    rng = np.random.default_rng(seed)
    spans, at = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        spans.append((at, n, shape))
        at = -(-(at + n) // gap) * gap
    flat = rng.standard_normal(at).astype(np.float32)
    if dtype == np.uint16:  # bf16 bits
        flat = (flat.view(np.uint32) >> 16).astype(np.uint16)
    return flat, spans


SHAPES = [(4,), (256, 512), (3, 5), (256, 1024), (600, 1024), (8, 8), (1024, 1024), (2, 2200, 1024)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_is_packed_into_parts_and_reads_back_bit_exact(tmp_path, workers):
    flat, spans = batch(SHAPES)
    rows = [row(f"t{i}", s, seq=i) for i, (_, _, s) in enumerate(spans)]
    stored = []
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=workers)
    w.add_batch(rows, flat, spans, None, on_stored=lambda: stored.append(1))
    w.close(complete_through_step=0)
    assert stored == [1]
    d = inkling_probe.open(tmp_path)
    by_key = {r["key"]: r for r in d.index}
    for i, (offset, n, shape) in enumerate(spans):
        want = flat[offset: offset + n].reshape(shape)
        assert np.array_equal(d.array(f"t{i}"), want)
        r = by_key[f"t{i}"]
        assert r["hash"] == content_hash(want, "float32", shape)
        assert r["mean"] == pytest.approx(array_stats(want, "native")["mean"])
    # parts of up to 4 MiB: the first six tensors fill 3.9 MiB, the 4 MiB one is a second part, the
    # 18 MB one is a dataset of its own
    assert {by_key[f"t{i}"]["dataset"] for i in range(6)} == {"/packs/0/float32.0"}
    assert by_key["t6"]["dataset"] == "/packs/0/float32.1" and by_key["t6"]["offset"] == 0
    assert by_key["t7"]["dataset"] == "/tensors/0/t7" and by_key["t7"]["offset"] == -1
    parts, r, got = 0, by_key["t3"], None
    for segment in d.segments:  # one file, or with two job threads the step's large writes in two lanes
        with h5py.File(segment.path, "r") as f:  # plain h5py, as docs/FORMAT.md says
            parts += len(f["packs/0"]) if "packs/0" in f else 0
            if r["dataset"] in f:
                got = f[r["dataset"]][r["offset"]: r["offset"] + r["numel"]].reshape(256, 1024)
    assert np.array_equal(got, flat[spans[3][0]: spans[3][0] + spans[3][1]].reshape(256, 1024))
    assert parts == 2
    assert len(d.segments) == (2 if workers >= 2 else 1) and d.complete_through_step() == 0


def test_bf16_batches_are_packed_as_bf16_that_plain_h5py_reads_as_numbers(tmp_path):
    flat, spans = batch([(256, 512), (7,)], dtype=np.uint16)
    rows = [row(f"b{i}", s, "bfloat16", seq=i) for i, (_, _, s) in enumerate(spans)]
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=0)
    w.add_batch(rows, flat, spans, None)
    w.close(complete_through_step=0)
    d = inkling_probe.open(tmp_path)
    r = d.index[0]
    assert r["dataset"] == "/packs/0/bfloat16.0" and r["storage"] == "native"
    with h5py.File(d.segments[0].path, "r") as f:
        got = f[r["dataset"]][: r["numel"]]
    assert got.dtype == np.float32 and np.array_equal(got, bf16_bits_to_float32(flat[: 256 * 512]))


def test_a_segment_limit_inside_a_batch_keeps_each_part_in_its_segment(tmp_path):
    flat, spans = batch([(256, 1024)] * 6)
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=0, segment_mb=2)
    for step in range(2):
        rows = [row(f"t{i}", s, step=step, seq=i) for i, (_, _, s) in enumerate(spans)]
        w.add_batch(rows, flat, spans, None)
    w.close(complete_through_step=1)
    d = inkling_probe.open(tmp_path)
    assert len(d.segments) > 2
    for step in range(2):
        for i, (offset, n, shape) in enumerate(spans):
            assert np.array_equal(d.array(f"t{i}", step), flat[offset: offset + n].reshape(shape))


def test_a_failed_part_write_is_one_line_and_every_callback_comes_once(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(diskio, "_pwritev_all", full)
    flat, spans = batch(SHAPES[:4])
    rows = [row(f"t{i}", s, seq=i) for i, (_, _, s) in enumerate(spans)]
    stored = []
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=0)
    with pytest.raises(DumpError) as e:
        w.add_batch(rows, flat, spans, None, on_stored=lambda: stored.append(1))
    assert "disk full" in str(e.value) and "'t0'" in str(e.value) and "\n" not in str(e.value)
    assert stored == [1]
    w.abort()


def test_pwritev_finishes_a_short_write(tmp_path, monkeypatch):
    real = diskio.os.pwritev
    monkeypatch.setattr(diskio.os, "pwritev", lambda fd, views, offset: real(fd, [views[0][:3]], offset))
    path = tmp_path / "f"
    with open(path, "wb") as f:
        diskio._pwritev_all(f.fileno(), [memoryview(b"abcdef"), memoryview(b"gh"), memoryview(b"ijk")], 2)
    assert path.read_bytes() == b"\0\0abcdefghijk"


def test_with_compression_a_batch_is_not_packed_so_large_tensors_stay_compressed(tmp_path):
    flat, spans = batch([(4,), (512, 1024)])
    flat[:] = 0
    rows = [row(f"t{i}", s, seq=i) for i, (_, _, s) in enumerate(spans)]
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=0, compress="gzip")
    w.add_batch(rows, flat, spans, None)
    w.close(complete_through_step=0)
    d = inkling_probe.open(tmp_path)
    by_key = {r["key"]: r for r in d.index}
    assert by_key["t1"]["dataset"] == "/tensors/0/t1"
    with h5py.File(d.segments[0].path, "r") as f:
        assert f["/tensors/0/t1"].compression == "gzip"
    assert np.array_equal(d.array("t1"), np.zeros((512, 1024), np.float32))


def test_the_readers_pack_cache_is_bounded_by_bytes(tmp_path, monkeypatch):
    """Parts hold up to 4 MiB now: the reader keeps the packs it read up to PACK_CACHE_BYTES, not a
    count of packs (64 parts would be 256 MiB), and reads every tensor right after dropping some."""
    from inkling_probe.store import dump as dump_module

    shapes = [(1024, 1024)] * 6  # 4 MiB each: one part each
    flat, spans = batch(shapes)
    rows = [row(f"t{i}", s, seq=i) for i, (_, _, s) in enumerate(spans)]
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=0)
    w.add_batch(rows, flat, spans, None)
    w.close(complete_through_step=0)
    monkeypatch.setattr(dump_module, "PACK_CACHE_BYTES", 9 << 20)
    d = inkling_probe.open(tmp_path)
    assert len({r["dataset"] for r in d.index}) == 6 and all(r["offset"] == 0 for r in d.index)
    for _ in range(2):
        for i, (offset, n, shape) in enumerate(spans):
            assert np.array_equal(d.array(f"t{i}"), flat[offset: offset + n].reshape(shape))
            held = sum(a.nbytes for a in d._packs.values())
            assert 0 < held <= 9 << 20, held


def test_a_pack_read_costs_the_same_however_many_packs_are_held(tmp_path):
    """Over a long decode every step is a pack of its own and the cache holds thousands: a read must
    not visit the packs held (summing their bytes on every read made reading a run quadratic)."""
    from collections import OrderedDict

    visits = {"n": 0}

    class Counting(OrderedDict):
        def values(self):
            for v in super().values():
                visits["n"] += 1
                yield v

        def __iter__(self):
            for k in super().__iter__():
                visits["n"] += 1
                yield k

    per_read = []
    for steps in (4, 40):
        (tmp_path / f"s{steps}").mkdir()
        w = SegmentWriter(tmp_path / f"s{steps}", 0, 1, run_id="0123456789ab", workers=0)
        for step in range(steps):
            flat, spans = batch([(1, 64)] * 4, seed=step)
            w.add_batch([row(f"t{i}", s, step=step, seq=i) for i, (_, _, s) in enumerate(spans)], flat, spans, None)
        w.close(complete_through_step=steps - 1)
        d = inkling_probe.open(tmp_path / f"s{steps}")
        assert len({(r["step"], r["dataset"]) for r in d.index}) == steps  # a pack a step
        d._packs, visits["n"] = Counting(), 0
        for r in d.index:
            d.array(r["key"], step=r["step"])
        per_read.append(visits["n"] / len(d.index))
    assert per_read[1] <= per_read[0] + 0.1, per_read  # summed every read: ~10x more at 40 steps

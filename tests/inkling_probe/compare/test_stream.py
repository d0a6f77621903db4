"""Plain pairs measured chunk by chunk (compare/stream.py): the same numbers, bit for bit, as the
loaded arrays give (metrics, row errors and scales), in the metrics' own chunks; anything not plain
(set-aside rows, a pack, a dataset past the file's end) is loaded as before; bfloat16 streams,
widened chunk by chunk to the float32 values the loaded array holds."""
import json
import os

import numpy as np
import pytest
import torch

from inkling_probe.compare import compare, measure, stream
from inkling_probe.compare.align import entries
from inkling_probe.store.dump import Dump

from dumps import write

G = torch.Generator().manual_seed(5)
OPEN_PAIR = stream.open_pair


def _pair(tmp_path):
    keys = {"wide": torch.randn(1500, 512, generator=G),  # 768K values: two chunks of whole rows
            "lead": torch.randn(1, 700, 1024, generator=G),  # token dim 1 after a leading 1
            "flat": torch.randn(700000, generator=G),  # one value a row, three chunks
            "row_per_chunk": torch.randn(3, 600000, generator=G),  # rows wider than a chunk
            "halves": torch.randn(40000, 4, generator=G).half(),
            "ints": torch.randint(-9, 9, (300000,), generator=G, dtype=torch.int32),
            "bf16": torch.randn(1200, 256, generator=G).bfloat16(),  # 307K values: widened chunk by chunk
            "small": torch.randn(16, 32, generator=G)}  # in a pack: loaded
    ref = [(k, v) for k, v in keys.items()]
    cand = []
    for k, v in keys.items():
        c = v.clone()
        if v.is_floating_point():
            c = (v.float() + 1e-3 * torch.randn(v.shape, generator=G)).to(v.dtype)
            c.view(-1)[11] = float("nan")
            v.view(-1)[11] = float("nan")
        else:
            c.view(-1)[::7] += 1
        cand.append((k, c))
    return write(tmp_path / "r", [ref]), write(tmp_path / "c", [cand])


def _measured(ref, cand, streaming: bool, monkeypatch):
    used = []

    def spy(*a):
        got = OPEN_PAIR(*a) if streaming else None
        used.append(got is not None)
        return got
    monkeypatch.setattr(stream, "open_pair", spy)
    dr, dc = Dump(ref), Dump(cand)
    er, ec = entries(dr, None, "reference"), entries(dc, None, "candidate")
    out = {}
    for ident, e in er.items():
        m = measure.measure(dr, e, dc, ec[ident], "rel_rms", 1e-3)
        out[ident[0]] = m
    return out, used


def test_a_streamed_pair_measures_bit_for_bit_as_the_loaded_one(tmp_path, monkeypatch):
    ref, cand = _pair(tmp_path)
    loaded, _ = _measured(ref, cand, False, monkeypatch)
    streamed, used = _measured(ref, cand, True, monkeypatch)
    assert sum(used) == 7  # every plain key streamed (bf16 too); the packed key loaded
    for key, a in loaded.items():
        b = streamed[key]
        assert json.dumps(a.metrics.to_dict()) == json.dumps(b.metrics.to_dict()), key
        assert (a.status, a.error, a.note, a.token_rows, a.token_dim) == (b.status, b.error, b.note, b.token_rows, b.token_dim)
        for x, y in ((a.row_errors, b.row_errors), (a.row_scale, b.row_scale)):
            assert (x is None and y is None) or np.array_equal(x, y, equal_nan=True), key
        if a.columns is not None or b.columns is not None:
            assert np.array_equal(a.columns[0], b.columns[0]) and a.columns[1] == b.columns[1], key


def test_compare_reports_the_same_streamed_or_loaded(tmp_path, monkeypatch):
    ref, cand = _pair(tmp_path)
    a = compare(ref, cand, jobs=1).to_dict()
    monkeypatch.setattr(stream, "open_pair", lambda *a: None)
    b = compare(ref, cand, jobs=1).to_dict()
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_rows_set_aside_or_a_dataset_past_the_file_end_are_not_streamed(tmp_path, monkeypatch):
    ref, cand = _pair(tmp_path)
    dr, dc = Dump(ref), Dump(cand)
    er, ec = entries(dr, None, "reference"), entries(dc, None, "candidate")
    ident = next(i for i in er if i[0] == "wide")
    calls = []
    monkeypatch.setattr(stream, "open_pair", lambda *a: calls.append(a))
    m = measure.measure(dr, er[ident], dc, ec[ident], "rel_rms", 1e-3, set_aside=lambda n: [3])
    assert m.masked == [3] and not calls  # rows to set aside: loaded, never opened as a stream
    monkeypatch.undo()
    plain = stream.open_pair(dr, er[ident], dc, ec[ident])
    assert plain is not None
    plain.close()
    from inkling_probe.store import raw

    monkeypatch.setattr(raw, "fits", lambda fd, p: False)  # a dataset past the file's end: loaded (and unreadable)
    assert stream.open_pair(dr, er[ident], dc, ec[ident]) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8])
def test_read_into_reads_any_range(tmp_path, dtype):
    import h5py

    from inkling_probe.store import raw

    a = (np.arange(100000) % 251).astype(dtype)
    path = str(tmp_path / "f.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=a)
    with h5py.File(path, "r") as f:
        p = raw.plan(f["x"])
        fd = os.open(path, os.O_RDONLY)
        try:
            for start, n in ((0, 100000), (12345, 777), (99999, 1)):
                out = raw.scratch(0, p.dtype, n)
                assert np.array_equal(raw.read_into(fd, p, start, out, "x"), a[start: start + n])
            with pytest.raises(ValueError):
                raw.read_into(fd, p, 99999, raw.scratch(0, p.dtype, 2), "x")
        finally:
            os.close(fd)


def test_a_segment_that_cannot_be_opened_is_unreadable_and_leaks_no_descriptor(tmp_path):
    """The candidate's segment cut to 4 KiB after the dump was opened: measure says 'unreadable'
    with the file's name (the loaded path's answer), never raises, and keeps no descriptor open."""
    a = torch.randn(600, 256, generator=G)
    ref = write(str(tmp_path / "r"), [[("x", a)]])
    cand = write(str(tmp_path / "c"), [[("x", a + 1e-2 * torch.randn(600, 256, generator=G))]])
    dr, dc = Dump(ref), Dump(cand)
    er, ec = entries(dr, None, "reference"), entries(dc, None, "candidate")
    for name in os.listdir(cand):
        if name.endswith(".h5"):
            with open(os.path.join(cand, name), "r+b") as f:
                f.truncate(4096)
    def measure_all():
        for i, e in er.items():
            m = measure.measure(dr, e, dc, ec[i], "rel_rms", 1e-3)
            assert m.status == "unreadable" and ".h5" in m.note

    measure_all()  # the reference's segment is opened once and kept (the dump's open files)
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(5):
        measure_all()
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds  # one leaked a call before

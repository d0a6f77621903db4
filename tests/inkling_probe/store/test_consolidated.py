"""A rank's consolidated index (store/consolidated.py) answers for the segments it holds as they are
now, and only for them: a changed, removed, added or too-recent segment is opened itself, and a
missing, damaged or linked consolidated index is ignored; the answer is always the segments'."""
import os
import time

import h5py
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store import consolidated, segments
from inkling_probe.store import dump as dump_module

from dumps import write


def _segment_paths(path):
    return sorted(os.path.join(path, n) for n in os.listdir(path) if segments.schema.SEGMENT_RE.match(n))


def _settled(path, run_id):
    """Segment times moved 10 s back (as a run's segments are by the time it is listed), then the
    consolidated index written again."""
    for p in _segment_paths(path):
        os.utime(p, ns=(time.time_ns() - 10 ** 10,) * 2)
    assert consolidated.write_rank(path, 0, run_id)


@pytest.fixture
def dump(tmp_path):
    path = write(tmp_path / "d", [[("x", torch.full((3,), float(s))), ("y", torch.arange(4) + s)] for s in range(6)])
    d = inkling_probe.open(path)
    assert os.path.isfile(os.path.join(path, consolidated.file_name(0, d.run_id)))  # the recording wrote it
    _settled(path, d.run_id)
    return path, d.index, d.run_id


def _opened(monkeypatch):
    """The segment files the reader opens to read their index."""
    seen = []
    real = segments.read_segment

    def spy(p):
        seen.append(os.path.basename(p))
        return real(p)

    monkeypatch.setattr(segments, "read_segment", spy)
    monkeypatch.setattr(dump_module, "read_segment", spy)
    return seen


def test_recording_writes_it_and_readers_use_it(dump, monkeypatch):
    path, index, run_id = dump
    assert os.path.isfile(os.path.join(path, consolidated.file_name(0, run_id)))
    seen = _opened(monkeypatch)
    d = inkling_probe.open(path)
    assert seen == [] and d.index == index and d.steps("x") == list(range(6))
    assert float(d.array("x", step=4)[0]) == 4.0 and d.segments[-1].complete_through_step == 5


def test_changed_segment_is_opened(dump, monkeypatch):
    path, index, _ = dump
    victim = _segment_paths(path)[2]
    with h5py.File(victim, "r+") as f:  # the segment changes after the index was consolidated
        f.attrs["rank"] = [1, 2]
    seen = _opened(monkeypatch)
    with pytest.raises(DumpError, match="attribute 'rank' is not a scalar"):
        inkling_probe.open(path)
    assert seen == [os.path.basename(victim)]


def test_same_size_and_time_but_racy_is_opened(dump, monkeypatch):
    """A segment whose time is within SETTLED_NS of the index's could have changed in the same tick."""
    path, index, run_id = dump
    victim = _segment_paths(path)[3]
    os.utime(victim, ns=(time.time_ns(),) * 2)
    assert consolidated.write_rank(path, 0, run_id)
    seen = _opened(monkeypatch)
    assert inkling_probe.open(path).index == index and seen == [os.path.basename(victim)]


def test_removed_and_added_segments(dump, tmp_path, monkeypatch):
    path, index, _ = dump
    gone = _segment_paths(path)[1]
    os.unlink(gone)
    d = inkling_probe.open(path)
    assert 1 not in d.steps("x") and len(d.index) == len(index) - 2
    os.rename(os.path.join(path, consolidated.file_name(0, d.run_id)), tmp_path / "saved.h5")
    seen = _opened(monkeypatch)
    assert inkling_probe.open(path).index == d.index and len(seen) == 5  # missing: every segment opened


@pytest.mark.parametrize("spoil", ["garbage", "symlink", "fifo", "other_layout", "dir"])
def test_damaged_or_hostile_index_is_ignored(dump, tmp_path, spoil, monkeypatch):
    path, index, run_id = dump
    target = os.path.join(path, consolidated.file_name(0, run_id))
    os.unlink(target)
    if spoil == "garbage":
        with open(target, "wb") as f:
            f.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    elif spoil == "symlink":
        other = write(tmp_path / "o", [[("x", torch.zeros(3))]])
        _settled(other, inkling_probe.open(other).run_id)
        os.symlink(os.path.join(other, os.listdir(other)[0]), target)
    elif spoil == "fifo":
        os.mkfifo(target)
    elif spoil == "dir":
        os.mkdir(target)
    else:
        with h5py.File(target, "w") as f:
            f.attrs["format"] = consolidated.FORMAT
            f.attrs["version"] = consolidated.VERSION
            f.attrs["written_ns"] = time.time_ns()
            f["segments"] = [1, 2, 3]
    seen = _opened(monkeypatch)
    assert inkling_probe.open(path).index == index and len(seen) == 6


def test_entries_of_another_dump_are_not_taken(dump, tmp_path, monkeypatch):
    """A consolidated index copied from another dump names other files (or other sizes/times)."""
    path, index, run_id = dump
    other = write(tmp_path / "o", [[("x", torch.zeros(3))] for _ in range(6)])
    d = inkling_probe.open(other)
    _settled(other, d.run_id)
    os.replace(os.path.join(other, consolidated.file_name(0, d.run_id)),
               os.path.join(path, consolidated.file_name(0, "0" * 12)))
    assert inkling_probe.open(path).index == index


def test_write_never_follows_a_planted_link(dump, tmp_path):
    path, _, run_id = dump
    victim = tmp_path / "victim"
    victim.write_text("keep")
    tmp = os.path.join(path, consolidated.file_name(0, run_id) + ".tmp")
    os.symlink(victim, tmp)
    assert consolidated.write_rank(path, 0, run_id) is None and victim.read_text() == "keep"

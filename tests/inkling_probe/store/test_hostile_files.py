"""A dump folder is untrusted input: the reader opens regular files only, follows no soft or
external link, reads no data stored outside the file, keeps a bounded number of files open; the
writer never writes through a link planted in the folder."""
import os
import resource
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store.dump import MAX_OPEN_FILES

from dumps import write


@pytest.fixture
def dump(tmp_path):
    return write(tmp_path / "d", [[("x", torch.arange(6.0)), ("big", torch.ones(300, 300))]])


def seg(path) -> str:
    return os.path.join(path, sorted(n for n in os.listdir(path) if n.endswith(".h5"))[0])


def test_fifo_named_like_a_segment_is_refused_not_opened(tmp_path, dump):
    fifo = os.path.join(dump, "rank00000-seg000009.h5")
    os.mkfifo(fifo)
    with pytest.raises(DumpError, match=f"^{fifo}: not a regular file; a dump holds regular files only$"):
        inkling_probe.open(dump)  # opening it would block forever


def test_symlinked_segment_is_refused(tmp_path, dump):
    outside = tmp_path / "elsewhere.h5"
    os.replace(seg(dump), outside)
    os.symlink(outside, os.path.join(dump, "rank00000-seg000000.h5"))
    with pytest.raises(DumpError, match=": a symbolic link; a dump holds regular files only$"):
        inkling_probe.open(dump)


def _retarget(path, dataset, make):
    """Replace ``dataset`` in the segment with what ``make(f, name)`` creates under its name."""
    with h5py.File(path, "r+") as f:
        del f[dataset]
        make(f, dataset)


@pytest.mark.parametrize("kind", ["external_link", "soft_link", "external_storage", "virtual"])
def test_links_and_outside_data_are_refused(tmp_path, dump, kind):
    secret = tmp_path / "secret.h5"
    with h5py.File(secret, "w") as f:
        f["data"] = np.full((300, 300), 7.0, np.float32)
    raw = tmp_path / "secret.bin"
    np.full((300, 300), 7.0, np.float32).tofile(raw)
    d = inkling_probe.open(dump)
    path, dataset = seg(dump), next(r for r in d.index if r["key"] == "big")["dataset"]
    d.close()

    def make(f, name):
        if kind == "external_link":
            f[name] = h5py.ExternalLink(str(secret), "/data")
        elif kind == "soft_link":
            f["/elsewhere"] = np.full((300, 300), 7.0, np.float32)
            f[name] = h5py.SoftLink("/elsewhere")
        elif kind == "external_storage":
            f.create_dataset(name, shape=(300, 300), dtype=np.float32, external=[(str(raw), 0, h5py.h5f.UNLIMITED)])
        else:
            layout = h5py.VirtualLayout(shape=(300, 300), dtype=np.float32)
            layout[:] = h5py.VirtualSource(str(secret), "data", shape=(300, 300))
            f.create_virtual_dataset(name, layout)
    _retarget(path, dataset, make)
    d = inkling_probe.open(dump)
    with pytest.raises(DumpError) as e:
        d.array("big")
    assert ("Link" in str(e.value) or "outside the file" in str(e.value)) and "\n" not in str(e.value)
    assert d.array("x").tolist() == list(range(6))  # the rest still reads


def test_writer_never_writes_through_a_planted_symlink(tmp_path):
    path = tmp_path / "d"
    path.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    from inkling_probe.store.writer import SegmentWriter
    w = SegmentWriter(path, 0, 1, run_id="0123456789ab")
    os.symlink(victim, path / "rank00000-seg000000-0123456789ab.h5.tmp")
    with pytest.raises(DumpError, match="already exists .*not written through"):
        w.add({"key": "x", "step": 0, "seq": 0, "call": 0, "rank": 0, "shape": "2", "dtype": "float32",
               "storage": "native", "shard": "replicated", "dim": -1, "token_dim": -1, "token_start": 0,
               "numel": 2, "meta": ""}, np.ones(2, np.float32))
    assert victim.read_text() == "precious"


def test_symlinked_lock_file_is_refused(tmp_path):
    path = tmp_path / "d"
    path.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, path / "rank00000.lock")
    with pytest.raises(DumpError, match="is a symbolic link"):
        write(path, [[("x", torch.ones(2))]])
    assert victim.read_text() == "precious"


MANY = """
import resource, sys
import numpy as np
from inkling_probe.store.writer import SegmentWriter
import inkling_probe
path, n = sys.argv[1], int(sys.argv[2])
import os; os.makedirs(path)
w = SegmentWriter(path, 0, 1, run_id="0123456789ab", pack_kb=0)
for s in range(n):
    w.add({"key": "x", "step": s, "seq": 0, "call": 0, "rank": 0, "shape": "1", "dtype": "float32",
           "storage": "native", "shard": "replicated", "dim": -1, "token_dim": -1, "token_start": 0,
           "numel": 1, "meta": ""}, np.array([s], np.float32))
    w.end_segment(s)
resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
d = inkling_probe.open(path)
total = sum(float(d.array("x", s)[0]) for s in range(n)) + sum(float(d.array("x", s)[0]) for s in range(n))
print(len(d.segments), len(d._files), total)
"""


def test_more_segments_than_open_files_allowed_all_read(tmp_path):
    """120 segments under `ulimit -n 48`: every step reads (twice), at most MAX_OPEN_FILES open."""
    n = 120
    out = subprocess.run([sys.executable, "-c", MANY, str(tmp_path / "d"), str(n)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    segments, open_files, total = out.stdout.split()
    assert int(segments) == n and int(open_files) == MAX_OPEN_FILES
    assert float(total) == 2 * sum(range(n))


@pytest.mark.parametrize("field, value", [("shape", "5x5"), ("numel", 99), ("dtype", "float8_e4m3fn")])
def test_crafted_index_rows_are_one_line_dump_errors(dump, field, value):
    with h5py.File(seg(dump), "r+") as f:
        index = f["index"][()]
        i = [k for k, r in enumerate(index) if r["key"] == b"x"][0]
        index[i][field] = value.encode() if isinstance(value, str) else value
        f["index"][...] = index
    d = inkling_probe.open(dump)
    with pytest.raises(DumpError) as e:
        d.tensor("x")
    assert "\n" not in str(e.value) and str(e.value).startswith(dump)

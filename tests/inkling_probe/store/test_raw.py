"""Contiguous datasets are read by preadv at their offset (store/raw.py): bit-exact against h5py,
bf16 NaN payloads included; chunked/compressed datasets and packs go through h5py; a dataset said
to lie past the end of its file is a one-line DumpError."""
import os

import h5py
import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store import raw, segments

from dumps import write


def _datasets(path):
    d = inkling_probe.open(path)
    out = {}
    for k in d.keys():
        row = d.rows(k)[0]
        out[k] = (d, row)
    return out


def test_raw_reads_equal_h5py_bit_for_bit(tmp_path):
    x = torch.randn(256, 128)  # 128 KiB fp32: its own dataset
    b = torch.randn(256, 256).to(torch.bfloat16)
    b.view(torch.int16)[0, :3] = torch.tensor([0x7FC1, -0x0041, 0x7F81], dtype=torch.int16)  # NaN payloads
    i = torch.arange(65536, dtype=torch.int32).reshape(256, 256)
    path = write(tmp_path / "d", [[("x", x), ("b", b), ("i", i)]], pack_kb=64)
    d = inkling_probe.open(path)
    for key in ("x", "b", "i"):
        row = d.rows(key)[0]
        with h5py.File(d.segments[row["_segment"]].path, "r") as f:
            ds = f[row["dataset"]]
            assert raw.plan(ds) is not None, key
            want = segments.read_values(ds)
        got = d.array(key)
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8)), key
    assert np.array_equal(d.tensor("b").view(torch.int16).numpy(), b.view(torch.int16).numpy())


def test_compressed_datasets_have_no_plan(tmp_path):
    x = torch.randn(512, 1024)  # 2 MiB: compressed when asked
    path = write(tmp_path / "d", [[("x", x)]], compress="gzip")
    d = inkling_probe.open(path)
    row = d.rows("x")[0]
    with h5py.File(d.segments[row["_segment"]].path, "r") as f:
        assert raw.plan(f[row["dataset"]]) is None
    assert np.array_equal(d.array("x"), x.numpy())


def test_bytes_past_the_end_of_the_file_are_an_error(tmp_path):
    p = tmp_path / "short"
    p.write_bytes(b"\0" * 100)
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(DumpError, match="past the end of the file"):
            raw.read(fd, raw.Plan(64, np.dtype("<f4"), (16,), False), "x")
        assert raw.read(fd, raw.Plan(36, np.dtype("<f4"), (16,), False), "x").shape == (16,)
    finally:
        os.close(fd)

"""slice.h5 is one file holding every tensor it lists, whatever lanes the writer would use by default."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.bundle import slice as slice_module
from inkling_probe.bundle.slice import write_slice
from inkling_probe.errors import DumpError
from inkling_probe.store import writer as writer_module

from dumps import write

KEYS = [f"layers.{i}.mlp" for i in range(5)]


def _dump(path, seed: int) -> str:
    g = torch.Generator().manual_seed(seed)
    # 5 x 3 MiB float32: a slice of four of them from two dumps holds 24 MiB, past the 8 MiB at
    # which a writer with two lanes opens a second file.
    return write(path, [[(k, torch.randn(768, 1024, generator=g)) for k in KEYS]])


@pytest.fixture
def culprit_and_dumps(tmp_path):
    """(the summary naming KEYS[3] as the culprit, {side: Dump}, the empty bundle folder, step)."""
    dumps = {"ref": inkling_probe.open(_dump(tmp_path / "ref", 0)),
             "cand": inkling_probe.open(_dump(tmp_path / "cand", 1))}
    step = dumps["ref"].rows(KEYS[0])[0]["step"]
    doc = {"culprits": [{"key": KEYS[3], "step": step}], "rows": [{"key": k, "step": step} for k in KEYS]}
    out = tmp_path / "bundle"
    out.mkdir()
    yield doc, dumps, out, step
    for d in dumps.values():
        d.close()


def test_a_slice_past_the_lane_threshold_is_one_file_holding_every_tensor(culprit_and_dumps, monkeypatch):
    monkeypatch.setattr(writer_module, "default_lanes", lambda workers: 2)  # as on a machine of 4+ cores
    doc, dumps, out, step = culprit_and_dumps
    result = write_slice(doc, dumps, str(out / "slice.h5"))
    assert sorted(p.name for p in out.iterdir()) == ["slice.h5"]
    assert result.left_out == [] and len(result.keys) == 8 and result.nbytes == 8 * 768 * 1024 * 4
    with inkling_probe.open(str(out / "slice.h5")) as s:
        assert sorted(s.keys()) == sorted(result.keys)
        for name in result.keys:
            side, key = name.split("/", 1)
            np.testing.assert_array_equal(s.array(name, step), dumps[side].array(key, step))


def test_a_writer_that_splits_the_slice_is_refused_in_one_line_and_leaves_nothing(culprit_and_dumps, monkeypatch):
    class TwoLanes(writer_module.SegmentWriter):  # what slice.py's writer did on 4+ cores before
        def __init__(self, *args, **kw):
            super().__init__(*args, **{**kw, "lanes": 2, "workers": 2})
    monkeypatch.setattr(slice_module, "SegmentWriter", TwoLanes)
    doc, dumps, out, _ = culprit_and_dumps
    with pytest.raises(DumpError, match="2 segment files where one was expected"):
        write_slice(doc, dumps, str(out / "slice.h5"))
    assert list(out.iterdir()) == []  # no slice.h5, no .slice-tmp left behind

"""A segment deleted from the middle of a rank's run is reported (issue 42: `ls` did not mention
the gap; the test failed before): the writer numbers each rank's segments 0, 1, 2, ... without
skipping one (store/segments.py ``missing_segments``)."""
import json
import os

import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group

from dumps import write


def _four_segments(path):
    write(path, [[("x", torch.ones(1000) * s)] for s in range(4)], segment_mb=0.001)
    names = sorted(n for n in os.listdir(path) if "-seg" in n)
    assert len(names) == 4, names
    return names


def test_a_deleted_middle_segment_is_reported(tmp_path):
    names = _four_segments(tmp_path / "d")
    os.remove(tmp_path / "d" / names[2])
    assert inkling_probe.open(tmp_path / "d").missing_segments == ["rank 0: segment 2"]
    r = CliRunner().invoke(group, ["ls", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    assert "segment files missing (rank 0: segment 2)" in r.stdout
    r = CliRunner().invoke(group, ["ls", str(tmp_path / "d"), "--json"])
    assert json.loads(r.stdout)["missing_segments"] == ["rank 0: segment 2"]


def test_a_whole_dump_has_no_gap(tmp_path):
    _four_segments(tmp_path / "d")
    assert inkling_probe.open(tmp_path / "d").missing_segments == []
    assert "missing" not in CliRunner().invoke(group, ["ls", str(tmp_path / "d")]).stdout


def test_compare_notes_the_gap(tmp_path):
    names = _four_segments(tmp_path / "d")
    _four_segments(tmp_path / "ref")
    os.remove(tmp_path / "d" / names[2])
    r = CliRunner().invoke(group, ["compare", str(tmp_path / "ref"), str(tmp_path / "d"), "--jobs", "1"])
    assert "note: " + str(tmp_path / "d") + ": segment files missing (rank 0: segment 2)" in r.stderr, r.stderr

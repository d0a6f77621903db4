"""Segment numbers past 999999 (six digits in the name) are read, in the order written."""
from __future__ import annotations

import os

import torch

import inkling_probe
from inkling_probe.store import schema

from dumps import write


def test_segment_names_of_seven_digits_parse_and_sort_as_numbers():
    run = "0123456789ab"
    names = [schema.segment_name(0, n, run) for n in (1_000_000, 999_999, 2)] + ["rank00000.lock"]
    assert schema.parse_segment_name(names[0]) == (0, 1_000_000, run)
    assert schema.in_segment_order(names) == ["rank00000.lock", *(schema.segment_name(0, n, run)
                                                                   for n in (2, 999_999, 1_000_000))]


def test_a_dump_whose_segments_pass_seg999999_reads_every_step(tmp_path):
    path = write(tmp_path / "d", [[("x", torch.full((300_000,), float(s)))] for s in range(3)], segment_mb=1)
    names = schema.in_segment_order(n for n in os.listdir(path) if schema.SEGMENT_RE.match(n))
    assert len(names) == 3  # one segment a step
    for name, number in zip(names, (999_998, 999_999, 1_000_000)):
        rank, _, run = schema.parse_segment_name(name)
        os.rename(os.path.join(path, name), os.path.join(path, schema.segment_name(rank, number, run)))
    for n in [n for n in os.listdir(path) if n.endswith(".index")]:
        os.remove(os.path.join(path, n))  # the consolidated index names the old files
    with inkling_probe.open(path) as d:
        assert [float(d.array("x", s)[0]) for s in range(3)] == [0.0, 1.0, 2.0]

"""Rank numbers and world sizes from foreign names and metadata cost what the files present cost:
issue 42 measured a file named ``rank=99999999999`` or a world size of 10**12 building a set of
every rank (4.9 GB, MemoryError exit 3) in ``ls``, ``import`` and ``compare``; ``rank=-1`` read as
"recorded by 0 ranks"; a non-UTF-8 file name as a truncated torch file. Each test failed before."""
import os
import subprocess
import sys

import torch

from .cli_errors import one_line_error, run


def dumper_file(folder, rank, meta=None):
    folder.mkdir(exist_ok=True)
    torch.save({"value": torch.ones(2), "meta": meta or {}}, folder / f"step=0___rank={rank}___dump_index=1___name=x.pt")
    return folder


def _capped(*args):
    """inkling-probe in a process whose address space is capped at 3 GiB (the old code needed 4.9 GB)."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from inkling_probe.cli import main; main(sys.argv[1:])")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_a_huge_rank_number_is_told_as_a_range(tmp_path):
    d = dumper_file(tmp_path / "d", 99999999999)
    done = _capped("ls", d)  # first in a capped process: the old code took 4.9 GB here
    assert done.returncode == 2 and "ranks 0..99999999998 are missing (99999999999 missing)" in done.stderr, done.stderr
    err = one_line_error(run("ls", d), "ranks 0..99999999998 are missing", "(99999999999 missing)")
    assert "world of 100000000000" in err
    one_line_error(run("import", d, tmp_path / "o"), "ranks 0..99999999998 are missing")
    assert not (tmp_path / "o").exists()


def test_a_huge_world_size_in_the_dumpers_metadata(tmp_path):
    d = dumper_file(tmp_path / "d", 0, {"world_size": 10**12})
    done = _capped("compare", d, d)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        "a world of 1000000000000 with rank 0 present: ranks 1..999999999999 are missing (999999999999 missing); "
        "a dump needs every rank's files"), done.stderr


def test_gaps_between_ranks_are_named(tmp_path):
    d = tmp_path / "d"
    for rank in (0, 3, 7):
        dumper_file(d, rank, {"world_size": 10})
    one_line_error(run("ls", d), "ranks 1..2, 4..6, 8..9 are missing (7 missing)")


def test_a_negative_rank_is_one_clear_line(tmp_path):
    d = dumper_file(tmp_path / "d", -1)
    for args in (("ls", d), ("show", d, "x"), ("import", d, tmp_path / "o")):
        one_line_error(run(*args), "rank=-1", "a rank is a number >= 0")


def test_a_file_name_that_is_not_utf8(tmp_path):
    folder = os.fsencode(tmp_path / "d")
    os.mkdir(folder)
    torch.save(torch.ones(2), tmp_path / "good.pt")
    os.rename(tmp_path / "good.pt", os.path.join(folder, b"t\xff.pt"))
    one_line_error(run("ls", tmp_path / "d"), r"t\xff.pt", "a file name that is not UTF-8")

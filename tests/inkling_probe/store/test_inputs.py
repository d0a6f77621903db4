"""Inputs that are not regular files are refused up front, sizes bounded before reading: a FIFO hung
``health`` and ``paired``, ``/dev/zero`` grew to MemoryError (store/inputs.py)."""
import os
import subprocess
import sys

import pytest

from inkling_probe.store.inputs import BadInputFile, check_regular, open_regular, read_bytes, read_text

GOOD = '{"id": 0, "tokens": [1, 2], "finish_reason": "stop", "correct": true}\n'


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _cli(*args, timeout=60):
    r = subprocess.run([sys.executable, "-m", "inkling_probe.cli", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, r.stderr


@pytest.mark.parametrize("command", ["health", "paired"])
@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_health_and_paired_refuse_inputs_that_are_not_regular_files(tmp_path, fifo, command, kind):
    bad = {"fifo": fifo, "device": "/dev/zero", "directory": tmp_path}[kind]
    good = tmp_path / "good.jsonl"
    good.write_text(GOOD)
    code, err = _cli(command, bad, *([good] if command == "paired" else []))  # hung / MemoryError before
    assert code == 2 and err.count("\n") == 1 and "not a regular file" in err, err
    assert f"{bad}: " in err


def test_helpers_name_the_kind_and_never_block(tmp_path, fifo):
    for path, kind in [(fifo, "a FIFO"), ("/dev/zero", "a device"), (tmp_path, "a directory")]:
        for read in (read_text, read_bytes, check_regular):
            with pytest.raises(BadInputFile, match=f"^{path}: {kind}"):
                read(path, "log")
    with pytest.raises(BadInputFile, match=r"can.t read the log \(No such file or directory\)"):
        read_text(tmp_path / "missing", "log")


def test_sizes_are_bounded_before_reading(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)  # a sparse 1 TiB file: refused from its size, not read
    with pytest.raises(BadInputFile, match=r"1099511627776 bytes, over the 1 GiB limit \(log\)"):
        read_bytes(big, "log")
    small = tmp_path / "small"
    small.write_bytes(b"abc")
    assert read_bytes(small, "log", max_bytes=3) == b"abc"
    with pytest.raises(BadInputFile, match="over the 2 bytes limit"):
        read_bytes(small, "log", max_bytes=2)
    with open_regular(small, "log", text=True) as fh:
        assert fh.read() == "abc"
    small.write_bytes(b"\xff")
    with pytest.raises(BadInputFile, match=r"not utf-8 text \(byte 0\)"):
        read_text(small, "log")


def test_name_maps_and_saved_compare_documents_go_through_it(tmp_path, fifo):
    from inkling_probe.errors import ProbeError, SettingsError
    from inkling_probe.store.namemap import NameMap
    from inkling_probe.views.doc import as_doc

    with pytest.raises(SettingsError, match="a FIFO"):
        NameMap.load(fifo)
    with pytest.raises(ProbeError, match="a FIFO"):
        as_doc(str(fifo))
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ProbeError, match="not a compare --json document"):
        as_doc(str(tmp_path / "bad.json"))


def test_layer_ranges_are_bounded_before_they_are_built():
    """``--layers 0-99999999999`` grew a set of 10^11 ids to MemoryError."""
    from click.testing import CliRunner

    from inkling_probe.cli import group

    r = CliRunner().invoke(group, ["bisect", "precision", "--cmd", "true", "--layers", "0-99999999999"])
    assert r.exit_code == 2 and "layer 99999999999 is past 65535" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1

"""Damaged safetensors inputs are one line and exit 2 (they were MemoryError, KeyError, reshape and
mmap errors: exit 3), checked before any byte is mapped (store/safetensors_header.py)."""
import json
import os
import struct

import pytest
from click.testing import CliRunner

from inkling_probe.store.safetensors_header import BadSafetensors, read_header


def _file(path, header, data=b""):
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


W = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
DAMAGED = {
    "huge_header": (lambda p: p.write_bytes(struct.pack("<Q", 1 << 62) + b"{}"), "header of 4611686018427387904 bytes"),
    "short": (lambda p: p.write_bytes(b"\x01\x02"), r"not a safetensors file \(2 bytes\)"),
    "not_json": (lambda p: _file(p, b"{abc}"), "header is not JSON"),
    "not_object": (lambda p: _file(p, [1]), "header is a JSON list"),
    "entry_not_object": (lambda p: _file(p, {"w": 3}), "tensor 'w': its entry is not an object"),
    "past_end": (lambda p: _file(p, W), r"data_offsets \[0, 8\] outside the file's 0 data bytes"),
    "bad_dtype": (lambda p: _file(p, {"w": {**W["w"], "dtype": "Q9"}}, bytes(8)), "unknown dtype 'Q9'"),
    "bad_shape": (lambda p: _file(p, {"w": {**W["w"], "shape": [-1]}}, bytes(8)), "shape is not a list"),
    "shape_mismatch": (lambda p: _file(p, {"w": {**W["w"], "shape": [3]}}, bytes(8)), "needs 12 bytes, data_offsets span 8"),
    "bad_offsets": (lambda p: _file(p, {"w": {**W["w"], "data_offsets": [0]}}, bytes(8)), r"data_offsets is not \[begin, end\]"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_headers_are_one_line(tmp_path, case):
    make, why = DAMAGED[case]
    path = tmp_path / "x.safetensors"
    make(path)
    with pytest.raises(BadSafetensors, match=why) as e:
        read_header(path)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_a_good_file_and_a_fifo(tmp_path):
    good = _file(tmp_path / "ok.safetensors", {**W, "__metadata__": {"a": "b"}}, bytes(8))
    entries, start = read_header(good)
    assert entries == {"w": {"dtype": "F32", "shape": (2,), "data_offsets": (0, 8)}}
    assert start == os.path.getsize(good) - 8
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadSafetensors, match="a FIFO"):
        read_header(tmp_path / "fifo")


@pytest.mark.parametrize("case", ["huge_header", "past_end", "bad_dtype", "shape_mismatch", "entry_not_object"])
def test_bisect_elements_exits_2_on_damaged_safetensors(tmp_path, case):
    from inkling_probe.cli import group

    good = _file(tmp_path / "ok.safetensors", W, bytes(8))
    bad = tmp_path / "bad.safetensors"
    DAMAGED[case][0](bad)
    r = CliRunner().invoke(group, ["bisect", "elements", str(good), str(bad), "--key", "w"])
    assert r.exit_code == 2 and r.output.startswith(f"Error: {bad}: "), r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("damage, why", [
    (lambda d: _corrupt_first_shard(d), "header of 4611686018427387904 bytes"),
    (lambda d: (d / "model.safetensors.index.json").write_text("{"), "not a safetensors index"),
])
def test_run_on_a_checkpoint_with_a_damaged_shard_or_index_exits_2(tmp_path, damage, why):
    """``run --ckpt`` died with SafetensorError / JSONDecodeError (exit 3)."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.cli.run import command
    from inkling_model.config import InklingConfig

    ckpt = write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "tiny", seed=0)
    damage(ckpt)
    r = CliRunner().invoke(command, ["--ckpt", str(ckpt), "--tokens", "5,6", "--max-new-tokens", "1",
                                     "--dump", str(tmp_path / "d")])
    assert r.exit_code == 2 and why in r.output and len(r.output.strip().splitlines()) == 1, r.output


def _corrupt_first_shard(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    data = shard.read_bytes()
    shard.write_bytes(struct.pack("<Q", 1 << 62) + data[8:])

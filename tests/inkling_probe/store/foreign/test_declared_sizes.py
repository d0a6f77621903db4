"""Issue 42's measured foreign-file cases: each lie is one line and exit 2, with nothing written;
memory and output stay proportional to the file (store/foreign/limits.py). Every test here failed
on the code before the fix (exit 0 with garbage or a dropped tensor, a hang, 1.1 GB inflated by
``ls``, 1.5 GB written by ``import``, 401 MB written from 1 MB)."""
import io
import json
import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store.foreign import limits

from .cli_errors import one_line_error, run


def short_record_pt(path, n_declared=100, n_held=10):
    """torch.save's zip with the pickle of a [n_declared] tensor over a record of n_held floats."""
    big, small = io.BytesIO(), io.BytesIO()
    torch.save(torch.arange(float(n_declared)), big)
    torch.save(torch.arange(float(n_held)), small)
    zb, zs = zipfile.ZipFile(big), zipfile.ZipFile(small)
    with zipfile.ZipFile(path, "w") as z:
        for info in zb.infolist():
            z.writestr(info.filename, (zs if info.filename.endswith("/data/0") else zb).read(info.filename))
    return path


def test_storage_record_shorter_than_its_tensor(tmp_path):
    """The mapped loader read on into the zip's own bytes: `show` and `import` exited 0 with garbage."""
    (tmp_path / "d").mkdir()
    short_record_pt(tmp_path / "d" / "t.pt")
    one_line_error(run("show", tmp_path / "d", "t"), "t.pt", "record data/0 holds 40 bytes", "declares 400")
    one_line_error(run("import", tmp_path / "d", tmp_path / "out"), "t.pt", "data/0")
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == ["d"]


def test_duplicate_keys_inside_one_pt(tmp_path):
    """'a.b' and 'a' -> 'b' both flatten to 'a.b': one tensor was dropped without a word."""
    (tmp_path / "d").mkdir()
    torch.save({"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}}, tmp_path / "d" / "t.pt")
    one_line_error(run("ls", tmp_path / "d"), "t.pt", "two tensors are named 'a.b'")


def test_a_tensor_shared_through_nested_lists_is_refused_at_once(tmp_path):
    """1.6 KB, 2**60 paths: `ls` never ended (a subprocess, so the old code's hang is a timeout)."""
    nested = [torch.ones(1)]
    for _ in range(60):
        nested = [nested, nested]
    (tmp_path / "d").mkdir()
    torch.save(nested, tmp_path / "d" / "t.pt")
    assert os.path.getsize(tmp_path / "d" / "t.pt") < 2000
    code = "import sys, inkling_probe; inkling_probe.open(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "shared containers are refused" in done.stderr.splitlines()[-1], done.stderr


def test_a_stride_0_tensor_may_not_read_as_more_than_the_bound(tmp_path):
    """A 1.3 KB .pt whose tensor is one float expanded 375M times: `import` wrote 1.5 GB. Here 4M
    (16 MB) from ~1.3 KB, past the 1 MiB floor: refused, nothing written."""
    (tmp_path / "d").mkdir()
    torch.save(torch.zeros(1).expand(4_000_000), tmp_path / "d" / "t.pt")
    err = one_line_error(run("import", tmp_path / "d", tmp_path / "out"), "t.pt", limits.INFLATE_VAR)
    assert "15.3 MB" in err
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) == ["d"]


def test_a_small_expanded_tensor_reads_as_its_values(tmp_path):
    torch.save({"m": torch.arange(4.0).expand(3, 4)}, tmp_path / "t.pt")
    np.testing.assert_array_equal(inkling_probe.open(tmp_path / "t.pt").array("m"), np.tile(np.arange(4.0), (3, 1)))


def _safetensors(path, header, data):
    text = json.dumps(header).encode() if isinstance(header, dict) else header
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_overlapping_safetensors_entries(tmp_path):
    """400 names over the same 1 MB: `import` wrote 401 MB. Here 400 over 64 KB."""
    data = bytes(1 << 16)
    header = {f"t{i}": {"dtype": "F32", "shape": [1 << 14], "data_offsets": [0, len(data)]} for i in range(400)}
    path = _safetensors(tmp_path / "t.safetensors", header, data)
    one_line_error(run("import", path, tmp_path / "out"), "t.safetensors", "tensors 't0' and 't1' overlap at bytes [0, 65536]")
    assert not (tmp_path / "out").exists()


def test_a_name_twice_in_a_safetensors_header(tmp_path):
    entry = '{"dtype": "F32", "shape": [1], "data_offsets": [%d, %d]}'
    text = ('{"w": %s, "w": %s}' % (entry % (0, 4), entry % (4, 8))).encode()
    path = _safetensors(tmp_path / "t.safetensors", text, np.array([1, 2], np.float32).tobytes())
    one_line_error(run("ls", path), "t.safetensors", "'w' is given twice")


def test_listing_an_npz_reads_headers_only(tmp_path, monkeypatch):
    """`ls` of a 1 MB .npz of zeros inflated it to 1.1 GB; listing now decompresses member headers
    only: 32 MB of zeros (allowed here by the setting) lists in well under 1 MB of Python memory."""
    np.savez_compressed(tmp_path / "z.npz", x=np.zeros(4 << 20))
    monkeypatch.setenv(limits.INFLATE_VAR, "4000")
    tracemalloc.start()
    d = inkling_probe.open(tmp_path / "z.npz")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [r["shape"] for r in d.index] == [(4 << 20,)]
    assert peak < 1 << 20, peak
    np.testing.assert_array_equal(d.array("x")[:4], np.zeros(4))


def test_an_npz_inflating_past_the_bound_is_refused_by_ls(tmp_path):
    np.savez_compressed(tmp_path / "z.npz", x=np.zeros(4 << 20))  # 32 MB from ~32 KB
    one_line_error(run("ls", tmp_path / "z.npz"), "z.npz", "its arrays read as 32 MB", limits.INFLATE_VAR)


def test_an_npz_member_whose_size_lies(tmp_path):
    member = io.BytesIO()
    np.save(member, np.arange(100.0))
    with zipfile.ZipFile(tmp_path / "z.npz", "w") as z:  # the header declares 900, the member holds 100
        z.writestr("x.npy", member.getvalue().replace(b"(100,)", b"(900,)"))
    one_line_error(run("ls", tmp_path / "z.npz"), "z.npz", "x.npy", "declares [900]")


def test_a_bad_inflate_setting_is_one_line(tmp_path, monkeypatch):
    np.savez(tmp_path / "a.npz", x=np.ones(2))
    monkeypatch.setenv(limits.INFLATE_VAR, "lots")
    one_line_error(run("ls", tmp_path / "a.npz"), "INKLING_PROBE_FOREIGN_INFLATE='lots'")


def test_one_header_parse_per_safetensors_file(tmp_path, monkeypatch):
    """Reading n tensors parsed the header n + 1 times (quadratic: 2000 tensors 21.6 s); once now.
    scripts/bench_foreign_read.py prints the timings side by side."""
    from inkling_probe.store import safetensors_header

    n = 50
    header = {f"t{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(n)}
    path = _safetensors(tmp_path / "t.safetensors", header, np.arange(n, dtype=np.float32).tobytes())
    calls = []
    real = safetensors_header.read_header
    monkeypatch.setattr(safetensors_header, "read_header", lambda p: calls.append(p) or real(p))
    d = inkling_probe.open(path)
    assert [float(d.array(f"t{i}")[0]) for i in range(n)] == list(range(n))
    assert len(calls) == 1


def test_a_truncated_pt_record_past_the_end(tmp_path):
    (tmp_path / "d").mkdir()
    short_record_pt(tmp_path / "d" / "t.pt", n_declared=100_000)
    with pytest.raises(DumpError, match="record data/0 holds 40 bytes, its storage declares 400000"):
        inkling_probe.open(tmp_path / "d")


def test_an_import_failing_midway_leaves_nothing(tmp_path, monkeypatch):
    """A read failing after the first tensor was written (the old import left DST with a segment)."""
    from inkling_probe.store.foreign import open_foreign
    from inkling_probe.store.foreign.convert import convert

    (tmp_path / "d").mkdir()
    for name in ("a", "b"):
        np.save(tmp_path / "d" / f"{name}.npy", np.arange(4.0))
    dump = open_foreign(tmp_path / "d")
    real, calls = dump._load_array, []

    def failing_second(row):
        calls.append(row)
        if len(calls) == 2:
            raise DumpError(f"{row['_src'][0]}: the disk went away")
        return real(row)
    monkeypatch.setattr(dump, "_load_array", failing_second)
    with pytest.raises(DumpError, match="the disk went away"):
        convert(dump, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_npz_data_damage_found_at_read_leaves_nothing(tmp_path):
    """Listing reads member headers only, so a damaged member's data shows when it is read (a CRC):
    import stops with one line and neither DST nor its hidden folder beside it is left."""
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "a.npy", np.arange(4.0))
    np.savez(d / "b.npz", x=np.arange(64.0))
    raw = bytearray((d / "b.npz").read_bytes())
    raw[raw.index(np.arange(64.0).tobytes()) + 100] ^= 0xFF  # a data byte: the header still reads
    (d / "b.npz").write_bytes(bytes(raw))
    one_line_error(run("import", d, tmp_path / "out"), "b.npz")
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_legacy_pt_reads_and_its_storage_sizes_are_checked(tmp_path):
    """torch's pre-1.6 format: read as it was; a storage declaring more bytes than the file holds is
    refused before torch's loader allocates it."""
    import re

    path = tmp_path / "t.pt"
    torch.save({"a": torch.arange(6.0).reshape(2, 3), "b": [torch.ones(2, dtype=torch.bfloat16)]}, path,
               _use_new_zipfile_serialization=False)
    d = inkling_probe.open(path)
    np.testing.assert_array_equal(d.array("a"), np.arange(6.0, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(d.array("b.0"), np.ones(2, np.float32))
    d.close()
    # 6 floats -> 255 (1020 bytes; 1024 with b's), in a file of 510 bytes
    lie = re.sub(rb"(cpuq.)K\x06", lambda m: m[1] + b"K\xff", path.read_bytes(), count=1)
    assert lie != path.read_bytes()
    path.write_bytes(lie)
    with pytest.raises(DumpError, match="storages declare 1024 bytes in a file of"):
        inkling_probe.open(path)


def test_empty_and_shared_tensor_entries_read(tmp_path):
    """Refusing shared containers must not refuse what is not one: empty tuples (one object in
    Python) and a tensor under two names (a tied weight) read as they are."""
    t = torch.arange(3.0)
    torch.save({"a": (), "b": (), "w": t, "tied": t, "out": (t, None)}, tmp_path / "t.pt")
    d = inkling_probe.open(tmp_path / "t.pt")
    assert sorted(d.keys()) == ["out.0", "tied", "w"]
    np.testing.assert_array_equal(d.array("tied"), np.arange(3.0, dtype=np.float32))

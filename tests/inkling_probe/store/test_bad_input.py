"""Bad input to the store and the recording settings: each fails with a one-line error naming the
file, key or variable at fault, never a traceback from h5py or a silent overwrite."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch

import inkling_probe
from inkling_probe import settings
from inkling_probe.errors import DumpError, KeyNotFound, SettingsError

from dumps import write

SEG0 = "rank00000-seg000000.h5"  # a schema 1 name (still read); recordings add their run id


def first_segment(folder) -> Path:
    return sorted(Path(folder).glob("rank00000-seg000000*.h5"))[0]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """A 2-step dump: 'x' [3, 4] (packed) and 'big' [300, 300] float32 (own dataset), steps 0 and 1."""
    steps = [[("x", torch.arange(12.0).reshape(3, 4) + s), ("big", torch.full((300, 300), float(s)))]
             for s in range(2)]
    return Path(write(tmp_path_factory.mktemp("bad") / "d", steps, writer="process"))


def one_line_error(path, error=DumpError, **match) -> str:
    with pytest.raises(error) as e:
        inkling_probe.open(path)
    message = str(e.value)
    assert message and "\n" not in message
    return message


def dump_with_segment(tmp_path, dump, edit) -> tuple:
    """A copy of ``dump`` whose first segment file has been changed by ``edit(path)``."""
    copy = tmp_path / "copy"
    shutil.copytree(dump, copy)
    seg = first_segment(copy)
    edit(seg)
    return copy, seg


# -- opening ----------------------------------------------------------------------------------------
def test_missing_path(tmp_path):
    message = one_line_error(tmp_path / "nope")
    assert message == f"{tmp_path / 'nope'}: no such file or directory"


def test_empty_directory(tmp_path):
    message = one_line_error(tmp_path)
    assert message.startswith(f"{tmp_path}: not an inkling-probe dump") and "unfinished" not in message


def test_directory_with_only_an_unfinished_segment_says_so(tmp_path):
    (tmp_path / (SEG0 + ".tmp")).write_bytes(b"\x89HDF\r\n\x1a\n half")
    assert "1 unfinished segment(s)" in one_line_error(tmp_path)


@pytest.mark.parametrize("as_segment_in_dir", [False, True])
def test_text_file(tmp_path, as_segment_in_dir):
    target = (tmp_path / SEG0) if as_segment_in_dir else (tmp_path / "notes.txt")
    target.write_text("hello, I am not HDF5\n" * 50)
    message = one_line_error(tmp_path if as_segment_in_dir else target)
    assert message.startswith(f"{target}: not an HDF5 file")


def test_truncated_segment(tmp_path, dump):
    def cut_in_half(seg):
        data = seg.read_bytes()
        seg.write_bytes(data[: len(data) // 2])
    copy, seg = dump_with_segment(tmp_path, dump, cut_in_half)
    assert one_line_error(copy).startswith(f"{seg}: truncated or corrupt HDF5 file")


def test_another_programs_hdf5_file(tmp_path):
    other = tmp_path / "weights.h5"
    with h5py.File(other, "w") as f:
        f["w"] = [1.0, 2.0]
        f.attrs["creator"] = "someone else"
    assert one_line_error(other) == f"{other}: an HDF5 file, but not an inkling-probe dump (no format attribute)"
    shutil.copy(other, tmp_path / SEG0)  # same, under a segment's name inside a folder
    assert one_line_error(tmp_path).startswith(f"{tmp_path / SEG0}: an HDF5 file, but not")


def test_newer_schema_version(tmp_path, dump):
    def bump(seg):
        with h5py.File(seg, "r+") as f:
            f.attrs["schema_version"] = f.attrs["schema_version"] + 1
    copy, seg = dump_with_segment(tmp_path, dump, bump)
    message = one_line_error(copy)
    assert message.startswith(f"{seg}: schema version 4 is newer than this inkling-probe reads (3)")


def test_segment_without_index(tmp_path, dump):
    def drop_index(seg):
        with h5py.File(seg, "r+") as f:
            del f["index"]
    copy, seg = dump_with_segment(tmp_path, dump, drop_index)
    assert one_line_error(copy) == f"{seg}: segment has no index dataset (file damaged?)"


def test_unfinished_tmp_segment_beside_complete_ones_is_ignored(tmp_path, dump):
    copy, seg = dump_with_segment(tmp_path, dump, lambda seg: None)
    junk = copy / "rank00000-seg000002.h5.tmp"
    junk.write_bytes(b"half a file")
    d = inkling_probe.open(copy)
    assert d.unfinished == [str(junk)] and d.steps("x") == [0, 1]


# -- reading ----------------------------------------------------------------------------------------
def test_unknown_key(dump):
    d = inkling_probe.open(dump)
    with pytest.raises(KeyNotFound) as e:
        d.tensor("layers.9.nope")
    assert str(e.value) == f"{dump}: no key 'layers.9.nope' (2 keys; try `inkling-probe ls`)"
    assert isinstance(e.value, KeyError)  # also a KeyError, for dict-like use


def test_no_such_step(dump):
    d = inkling_probe.open(dump)
    with pytest.raises(KeyNotFound) as e:
        d.tensor("x", step=7)
    assert str(e.value) == f"{dump}: key 'x' has no step 7 (steps: [0, 1])"


def test_no_such_rank_or_call(dump):
    d = inkling_probe.open(dump)
    with pytest.raises(KeyNotFound, match=r"key 'x' step 1 was not recorded by rank 3$"):
        d.tensor("x", step=1, rank=3)
    with pytest.raises(KeyNotFound, match=r"key 'x' has no step 0 call 1 "):
        d.tensor("x", step=0, call=1)


def test_stats_only_tensor_says_so(tmp_path):
    with inkling_probe.recording(tmp_path / "d", mode="stats"):
        inkling_probe.probe("x", torch.ones(3))
    d = inkling_probe.open(tmp_path / "d")
    with pytest.raises(DumpError, match=r"key 'x' step 0 holds stats only"):
        d.tensor("x")


def test_index_naming_a_missing_dataset(tmp_path, dump):
    def drop_big(seg):
        with h5py.File(seg, "r+") as f:
            del f["tensors/0/big"]
    copy, seg = dump_with_segment(tmp_path, dump, drop_big)
    d = inkling_probe.open(copy)
    assert torch.equal(d.tensor("x"), torch.arange(12.0).reshape(3, 4))  # the rest still reads
    with pytest.raises(DumpError) as e:
        d.tensor("big")
    assert str(e.value) == f"{seg}: index names '/tensors/0/big' but the dataset is missing"


# -- recording into an existing dump ------------------------------------------------------------------
def _record(path, value, steps=1, **overrides):
    with inkling_probe.recording(path, **overrides):
        for _ in range(steps):
            inkling_probe.step()
            inkling_probe.probe(f"v{value}", torch.full((2,), float(value)))


@pytest.mark.parametrize("writer", ["process", "inline"])
def test_existing_dump_is_never_overwritten_silently(tmp_path, writer):
    path = tmp_path / "d"
    _record(path, 1, steps=3, writer=writer)
    before = sorted(os.listdir(path))
    with pytest.raises(DumpError) as e:
        _record(path, 2, writer=writer)
    message = str(e.value)
    assert message.startswith(f"{path}: already holds a dump (3 files of rank 0") and "\n" not in message
    assert sorted(os.listdir(path)) == before
    d = inkling_probe.open(path)
    assert d.keys() == ["v1"] and d.steps("v1") == [0, 1, 2]


@pytest.mark.parametrize("how", ["argument", "env"])
def test_overwrite_replaces_this_ranks_files(tmp_path, monkeypatch, how):
    path = tmp_path / "d"
    _record(path, 1, steps=3)
    if how == "env":
        monkeypatch.setenv("INKLING_PROBE_OVERWRITE", "1")
        _record(path, 2)
    else:
        _record(path, 2, overwrite=True)
    segments = [n for n in os.listdir(path) if n.endswith(".h5")]
    assert len(segments) == 1  # the old dump's 3 segments are gone, not mixed in
    d = inkling_probe.open(path)
    assert d.keys() == ["v2"] and d.tensor("v2").tolist() == [2.0, 2.0]


def test_recording_path_that_is_a_file(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    with pytest.raises((DumpError, SettingsError), match=f"^{target}: exists and is not a directory$"):
        _record(target, 1)


# -- INKLING_PROBE_* values -----------------------------------------------------------------------
BAD_ENV = [
    ("INKLING_PROBE_MODE", "fast", "expected one of full|stats|hash"),
    ("INKLING_PROBE_STEPS", "a:b", "'a' is not an integer"),
    ("INKLING_PROBE_STEPS", "-1", "steps are >= 0"),
    ("INKLING_PROBE_TOKENS", "1:2:3", "expected 'A:B'"),
    ("INKLING_PROBE_RANKS", "0,x", "'x' is not an integer"),
    ("INKLING_PROBE_OVERWRITE", "maybe", "expected 1 or 0"),
    ("INKLING_PROBE_SEGMENT_MB", "0", "must be > 0"),
    ("INKLING_PROBE_PACK_KB", "lots", "expected a number"),
    ("INKLING_PROBE_WRITER", "thread", "expected one of auto|process|inline"),
    ("INKLING_PROBE_COMPRESS", "zstd", "expected one of none|gzip"),
    ("INKLING_PROBE_DURABILITY", "fsync", "expected one of disk|writer"),
    ("INKLING_PROBE_FOO", "1", "unknown variable"),
    ("INKLING_PROBE_SEGMENT_MB", "inf", "must be a finite number"),
    ("INKLING_PROBE_PACK_KB", "inf", "must be a finite number"),
    ("INKLING_PROBE_PACK_KB", "nan", "must be a finite number"),
    ("INKLING_PROBE_STPES", "0:4", "unknown variable (did you mean INKLING_PROBE_STEPS?)"),
    ("INKLING_PROBE_RUN", "a/b", "expected up to 32 letters"),
    ("RANK", "abc", "'abc' is not an integer"),
    ("RANK", "-1", "expected 0..0 (WORLD_SIZE=1)"),
    ("RANK", "100000", "expected 0..0 (WORLD_SIZE=1)"),
    ("WORLD_SIZE", "100001", "expected 1..100000"),
]


@pytest.mark.parametrize("var,value,why", BAD_ENV, ids=[f"{v}={x}" for v, x, _ in BAD_ENV])
def test_bad_env_value_is_a_one_line_settings_error(tmp_path, var, value, why):
    with pytest.raises(SettingsError) as e:
        settings.from_env({"INKLING_PROBE": str(tmp_path), var: value})
    message = str(e.value)
    assert message.startswith(var) and why in message and "\n" not in message


@pytest.mark.parametrize("var,value", [
    ("INKLING_PROBE_MODE", "fast"), ("INKLING_PROBE_STEPS", "x"),
    ("INKLING_PROBE_STEPS", "a:b"),
    ("INKLING_PROBE_RANKS", "0,x"),
    ("INKLING_PROBE_TOKENS", "0:z")])
def test_bad_env_message_quotes_the_value_as_set(tmp_path, var, value):
    with pytest.raises(SettingsError) as e:
        settings.from_env({"INKLING_PROBE": str(tmp_path), var: value})
    assert str(e.value).startswith(f"{var}={value!r}: ")


def test_unknown_variable_fails_even_when_recording_is_off():
    """A typo'd variable must not be ignored just because INKLING_PROBE is unset."""
    with pytest.raises(SettingsError, match="^INKLING_PROBE_STEP: unknown variable"):
        settings.from_env({"INKLING_PROBE_STEP": "0:4"})


def test_bad_override_names_the_setting(tmp_path):
    with pytest.raises(SettingsError, match="^INKLING_PROBE_MODE='fast': "):
        settings.make(tmp_path, mode="fast")
    with pytest.raises(SettingsError, match="^step: unknown recording setting"):
        settings.make(tmp_path, step="0:4")


@pytest.mark.slow
@pytest.mark.parametrize("var,value", [("INKLING_PROBE_MODE", "fast"), ("INKLING_PROBE_FOO", "1")])
def test_bad_env_value_fails_at_import(tmp_path, var, value):
    """A process that imports inkling_probe with a bad value stops at import, naming the variable."""
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), var: value}
    r = subprocess.run([sys.executable, "-c", "import inkling_probe; print('imported')"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "imported" not in r.stdout
    assert r.stderr.startswith(f"inkling-probe: {var}") and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "d").exists()


def test_dump_path_that_is_a_file_fails_at_start(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    with pytest.raises(SettingsError, match=f"^{target}: exists and is not a directory$"):
        settings.from_env({"INKLING_PROBE": str(target)})

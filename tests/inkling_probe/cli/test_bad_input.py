"""Bad input to `ls` and `show`: exit code 2 and one line on stderr naming the file, key or option at
fault, never a traceback. Through click's CliRunner, and through the real console script."""
import os
import shutil
import subprocess
import sys

import h5py
import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group

from dumps import write

SEG0 = "rank00000-seg000000.h5"
SCRIPT = os.path.join(os.path.dirname(sys.executable), "inkling-probe")


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    steps = [[("layers.0.attn.q", torch.arange(12.0).reshape(3, 4) + s), ("big", torch.full((300, 300), float(s)))]
             for s in range(2)]
    return write(tmp_path_factory.mktemp("cli_bad") / "d", steps, writer="process")


@pytest.fixture(scope="module")
def bad(dump, tmp_path_factory):
    """Bad inputs by name: (path given on the command line, the file the error must name)."""
    root = tmp_path_factory.mktemp("cli_bad_inputs")
    out = {"missing": (root / "nope", root / "nope"), "empty": (root / "empty", root / "empty")}
    (root / "empty").mkdir()
    (root / "notes.txt").write_text("not HDF5\n" * 40)
    out["text"] = (root / "notes.txt", root / "notes.txt")
    with h5py.File(root / "other.h5", "w") as f:
        f["weights"] = [1.0, 2.0]
    out["foreign"] = (root / "other.h5", root / "other.h5")

    def copy_with(name, edit):
        shutil.copytree(dump, root / name)
        seg = sorted((root / name).glob("rank00000-seg000000*.h5"))[0]
        edit(seg)
        out[name] = (root / name, seg)

    def cut_in_half(seg):
        data = seg.read_bytes()
        seg.write_bytes(data[: len(data) // 2])

    def bump_schema(seg):
        with h5py.File(seg, "r+") as f:
            f.attrs["schema_version"] = f.attrs["schema_version"] + 1

    copy_with("truncated", cut_in_half)
    copy_with("newer", bump_schema)
    return {k: (str(a), str(b)) for k, (a, b) in out.items()}


def run(*args):
    return CliRunner().invoke(group, [str(a) for a in args])


def assert_one_line_error(result, *names):
    """Exit 2, nothing on stdout, one 'Error: ...' line on stderr that names every one of ``names``."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


WHY = {
    "missing": "no such file or directory",
    "empty": "not an inkling-probe dump",
    "text": "not an HDF5 file",
    "foreign": "an HDF5 file, but not an inkling-probe dump",
    "truncated": "truncated or corrupt HDF5 file",
    "newer": "schema version 4 is newer than this inkling-probe reads (3)",
}


@pytest.mark.parametrize("case", list(WHY))
@pytest.mark.parametrize("command", ["ls", "show"])
def test_unreadable_dump(bad, case, command):
    given, culprit = bad[case]
    args = ["ls", given, "--json"] if command == "ls" else ["show", given, "layers.0.attn.q"]
    line = assert_one_line_error(run(*args), culprit, WHY[case])
    assert line.startswith(f"Error: {culprit}: ")


def test_show_unknown_key(dump):
    line = assert_one_line_error(run("show", dump, "layers.0.attn.k"), dump, "'layers.0.attn.k'")
    assert "no key" in line


def test_ls_pattern_matching_nothing(dump):
    assert_one_line_error(run("ls", dump, "layers.9.*"), dump, "'layers.9.*'")


def test_show_no_such_step(dump):
    line = assert_one_line_error(run("show", dump, "big", "--step", "9"), dump, "'big'", "no step 9")
    assert line.endswith("(steps: [0, 1])")


def test_ls_no_such_step(dump):
    assert_one_line_error(run("ls", dump, "--step", "9"), dump, "9")


def test_show_no_such_rank(dump):
    assert_one_line_error(run("show", dump, "big", "--rank", "3"), dump, "'big'", "rank 3")


@pytest.mark.parametrize("text,why", [
    ("a:b", "invalid literal for int()"),
    ("0,0,0", "3 indices for a 2-dim tensor"),
    ("1::0", "slice step cannot be zero"),
    ("7", "index 7 is out of bounds for axis 0 with size 3"),
    ("0:1:2:3", "bad slice part '0:1:2:3'"),
])
def test_show_bad_slice(dump, text, why):
    assert_one_line_error(run("show", dump, "layers.0.attn.q", "--slice", text), f"--slice {text!r}", why)


def test_good_slice_still_works(dump):
    """The control for the cases above: a valid slice exits 0 and prints the chosen values."""
    r = run("show", dump, "layers.0.attn.q", "--step", "1", "--slice", "1:3,2", "--json")
    assert r.exit_code == 0 and '"slice": [\n    7.0,\n    11.0\n  ]' in r.stdout


# -- the real console script: exit status and stderr as a shell sees them ----------------------------
@pytest.mark.slow
@pytest.mark.parametrize("case", ["truncated", "slice"])
def test_console_script_exits_2_with_one_line(dump, bad, case):
    args = {"truncated": ["ls", bad["truncated"][0]], "newer": ["show", bad["newer"][0], "big"],
            "key": ["show", dump, "nope"], "slice": ["show", dump, "big", "--slice", "x"]}[case]
    names = {"truncated": bad["truncated"][1], "newer": bad["newer"][1], "key": "'nope'",
             "slice": "--slice 'x'"}[case]
    env = {k: v for k, v in os.environ.items() if k != "INKLING_PROBE_DEBUG"}
    r = subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and names in lines[0], r.stderr
    assert "Traceback" not in r.stderr

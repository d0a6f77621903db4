"""`ls` and `show` through click's CliRunner: what a user sees, and the --json they script with."""
import json
import time

import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group

from dumps import write


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    steps = [[("layers.0.attn.q", torch.arange(12.0).reshape(3, 4) + s),
              ("layers.0.mlp.out", torch.tensor([1.0, float("nan"), -2.0])), ("logits", torch.ones(2, 3).bfloat16())]
             for s in range(2)]
    return write(tmp_path_factory.mktemp("cli") / "d", steps, writer="process")


def run(*args):
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


def test_ls_table_lists_every_key_in_order(dump):
    r = run("ls", dump, "--step", "1")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    order = [next(i for i, line in enumerate(lines) if k in line)
             for k in ("layers.0.attn.q", "layers.0.mlp.out", "logits")]
    assert order == sorted(order) and "3x4" in r.output and "bfloat16" in r.output


def test_ls_json_filters_and_stats(dump):
    r = run("ls", dump, "layers.*", "--json")
    assert r.exit_code == 0
    doc = json.loads(r.output)
    rows = doc["tensors"]
    assert {(t["key"], t["step"]) for t in rows} == {
        ("layers.0.attn.q", 0), ("layers.0.attn.q", 1), ("layers.0.mlp.out", 0), ("layers.0.mlp.out", 1)}
    q1 = next(t for t in rows if t["key"] == "layers.0.attn.q" and t["step"] == 1)
    assert q1["shape"] == [3, 4] and q1["mean"] == pytest.approx(6.5) and q1["absmax"] == 12.0
    out = next(t for t in rows if t["key"] == "layers.0.mlp.out")
    assert out["nan"] == 1 and out["mean"] == pytest.approx(-0.5)


def test_ls_reads_only_the_index(dump, monkeypatch):
    from inkling_probe.store import dump as dump_module

    monkeypatch.setattr(dump_module.Dump, "_load_array", lambda *a: pytest.fail("ls read tensor data"))
    assert run("ls", dump).exit_code == 0


def test_show_stats_slice_histogram(dump):
    r = run("show", dump, "layers.0.attn.q", "--step", "1", "--slice", "1:3,0")
    assert r.exit_code == 0
    assert "[5. 9.]" in r.output  # rows 1..2, column 0 of arange(12)+1
    assert "histogram" in r.output
    doc = json.loads(run("show", dump, "layers.0.attn.q", "--json").output)
    assert doc["stats"]["max"] == 11.0 and doc["stats"]["numel"] == 12 and sum(doc["histogram"]["counts"]) == 12
    doc = json.loads(run("show", dump, "layers.0.mlp.out", "--json").output)
    assert doc["stats"]["nan"] == 1 and doc["stats"]["mean"] == pytest.approx(-0.5)


def test_help_is_instant_and_lists_env():
    import subprocess
    import sys

    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "inkling_probe.cli", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    assert out.returncode == 0 and "INKLING_PROBE_MODE" in out.stdout and "ls" in out.stdout
    assert "torch" not in out.stderr
    check = subprocess.run([sys.executable, "-c", "import sys, inkling_probe.cli; "
                            "inkling_probe.cli.group.list_commands(None); print('torch' in sys.modules)"],
                           capture_output=True, text=True)
    assert check.stdout.strip() == "False", "the CLI group must not import torch"
    assert elapsed < 10

"""``inkling-probe make-checkpoint`` through click's CliRunner."""
import torch
from click.testing import CliRunner

from inkling_model.checkpoint import shards, synthetic
from inkling_model.cli.make_checkpoint import command
from inkling_model.config import InklingConfig


def test_writes_tiny_checkpoint_for_the_seed(tmp_path):
    out = tmp_path / "ck"
    res = CliRunner().invoke(command, ["--preset", "tiny", "--seed", "3", str(out)])
    assert res.exit_code == 0, res.output
    assert "tiny" in res.output
    assert InklingConfig.from_pretrained(out) == InklingConfig.preset("tiny")
    written, expected = shards.read_tensors(out), synthetic.random_tensors(InklingConfig.preset("tiny"), 3)
    assert set(written) == set(expected)
    assert all(torch.equal(written[n], expected[n]) for n in expected)


def test_refuses_nonempty_out(tmp_path):
    (tmp_path / "keep").write_text("x")
    res = CliRunner().invoke(command, ["--preset", "tiny", str(tmp_path)])
    assert res.exit_code == 2
    assert "not empty" in res.output and len(res.output.strip().splitlines()) == 1
    assert (tmp_path / "keep").read_text() == "x"


def test_unknown_preset_is_one_line(tmp_path):
    res = CliRunner().invoke(command, ["--preset", "huge", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "unknown preset 'huge'" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_full_preset_is_refused_before_allocating(tmp_path):
    res = CliRunner().invoke(command, ["--preset", "full", str(tmp_path / "o")])
    assert res.exit_code == 2 and "GiB" in res.output
    assert not (tmp_path / "o").exists()


def test_unknown_quant_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(command, ["--preset", "tiny", "--quant", "int4", str(tmp_path / "o")])
    assert res.exit_code == 2

"""`replay` (and `compare --replay`) through CliRunner with a module factory of this test module."""
import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import inkling_probe
from inkling_probe.cli.compare import command as compare_command
from inkling_probe.cli.replay import command as replay_command


class Block(nn.Module):
    def __init__(self, gain=1.0):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(16, 16, generator=g) / 4 * gain)

    def forward(self, x):
        return torch.tanh(x @ self.w)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) + 1


def build(ckpt, key, dtype):  # the --factory: "ckpt" names the variant here
    assert key == "block"
    return Block(gain={"good": 1.0, "bad": 1.5}[ckpt]).to(dtype)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "ref"
    with torch.no_grad(), inkling_probe.record(Net(), path, inputs=True, writer="inline") as net:
        inkling_probe.step()
        net(torch.randn(8, 16, generator=torch.Generator().manual_seed(1)))
    return str(path)


def factory():
    return f"{__name__}:build"


def invoke(cmd, *args):
    return CliRunner().invoke(cmd, list(args), catch_exceptions=False)


def test_replay_within_tolerance_exits_0(ref):
    r = invoke(replay_command, ref, "block", "--ckpt", "good", "--factory", factory())
    assert r.exit_code == 0, r.output
    assert "within tolerance" in r.output


def test_replay_of_a_broken_module_exits_1_with_its_local_error(ref):
    r = invoke(replay_command, ref, "block", "--ckpt", "bad", "--factory", factory(), "--json")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert doc["diverged"] and doc["outputs"][0]["key"] == "block"
    assert doc["outputs"][0]["metrics"]["rel_rms"] > 0.01


def test_compare_with_replay(ref):
    r = invoke(compare_command, ref, ref, "--replay", "block", "--ckpt", "bad", "--factory", factory(), "--json")
    assert r.exit_code == 1  # the dumps agree; the replayed module does not
    doc = json.loads(r.output)
    assert doc["culprit"] is None and doc["replay"]["diverged"]


@pytest.mark.parametrize("args,needle", [
    (["block", "--ckpt", "good", "--factory", "no_such_module:build"], "--factory"),
    (["nokey", "--ckpt", "good", "--factory", f"{__name__}:build"], "no recorded inputs"),
])
def test_bad_input_exits_2(ref, args, needle):
    r = invoke(replay_command, ref, *args)
    assert r.exit_code == 2 and needle in r.output


def test_compare_replay_needs_ckpt(ref):
    r = invoke(compare_command, ref, ref, "--replay", "block")
    assert r.exit_code == 2 and "--ckpt" in r.output


def test_toolkit_never_imports_the_model_and_finds_its_registered_factory():
    import pathlib
    import re

    from inkling_probe.cli.replay import load_factory

    src = pathlib.Path(__file__).resolve().parents[3] / "inkling_probe"
    importing = re.compile(r"^\s*(from|import)\s+inkling_model\b", re.M)
    offenders = [str(p) for p in src.rglob("*.py") if importing.search(p.read_text())]
    assert offenders == [], offenders  # DESIGN: dependencies point one way, model -> toolkit
    from inkling_model.plugins.replay_factory import build

    assert load_factory(None) is build and load_factory("inkling_model") is build

"""Replay a candidate module on a reference dump's recorded inputs: local error, weight layouts."""
import pytest
import torch
from torch import nn

import inkling_probe
from inkling_probe.compare import replay
from inkling_probe.errors import DumpError


class GatedMLP(nn.Module):
    """w13 rows interleaved [g0, u0, g1, u1, ...] like Inkling's."""

    def __init__(self, h=16, i=8):
        super().__init__()
        self.w13 = nn.Parameter(torch.randn(2 * i, h, generator=torch.Generator().manual_seed(0)) / 4)
        self.w2 = nn.Parameter(torch.randn(h, i, generator=torch.Generator().manual_seed(1)) / 4)

    def forward(self, x, scale=None):
        y = x @ self.w13.T
        out = (torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]) @ self.w2.T
        return out * scale if scale is not None else out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(16, 16)
        self.mlp = GatedMLP()

    def forward(self, x):
        return self.mlp(torch.tanh(self.pre(x)))


@pytest.fixture()
def ref_dump(tmp_path):
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad(), inkling_probe.record(net, tmp_path / "ref", inputs=True, writer="inline"):
        inkling_probe.step()
        net(torch.randn(12, 16))
    return str(tmp_path / "ref"), net


def test_correct_module_replays_within_tolerance(ref_dump):
    path, net = ref_dump
    res = replay(net.mlp, path, "mlp")
    assert not res.diverged and res.outputs[0].key == "mlp" and res.outputs[0].metrics.rel_rms < 1e-6


def test_local_error_without_upstream_contamination(ref_dump):
    path, net = ref_dump
    bad = GatedMLP()
    bad.load_state_dict(net.mlp.state_dict())
    with torch.no_grad():
        bad.w2.mul_(1.5)
    res = replay(bad, path, "mlp")
    assert res.diverged
    f = res.outputs[0].findings
    assert f and f[0].name == "constant_ratio" and f[0].evidence["ratio"] == pytest.approx(1.5)


def test_gate_up_layout_named_on_the_module_weights(ref_dump):
    path, net = ref_dump
    bad = GatedMLP()
    w = net.mlp.w13.detach()
    n = w.shape[0]
    # the fault: interleaved rows treated as concatenated and re-interleaved
    wrong = w.unflatten(0, (2, n // 2)).transpose(0, 1).flatten(0, 1)
    with torch.no_grad():
        bad.w13.copy_(wrong)
        bad.w2.copy_(net.mlp.w2)
    res = replay(bad, path, "mlp")
    assert res.diverged
    assert res.layout is not None and res.layout.evidence["parameter"] == "w13"
    assert res.layout.evidence["permutation"] == "interleaved_as_concat" and res.layout.evidence["dim"] == 0
    assert torch.equal(bad.w13, wrong)  # the search restores the module


def test_non_tensor_arguments_can_be_passed(ref_dump):
    path, net = ref_dump
    res = replay(net.mlp, path, "mlp", kwargs={"scale": 2.0})
    assert res.diverged and res.outputs[0].findings[0].evidence["matches"][0] == "2**1"


def test_no_recorded_inputs_is_an_error(tmp_path):
    with inkling_probe.recording(tmp_path / "d", writer="inline"):
        inkling_probe.probe("mlp", torch.ones(3))
    with pytest.raises(DumpError, match="no recorded inputs"):
        replay(GatedMLP(), str(tmp_path / "d"), "mlp")

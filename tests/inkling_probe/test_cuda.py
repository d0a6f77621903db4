"""The recorder on a GPU: device tensors round-trip, and eager probes refuse CUDA-graph capture."""
import pytest
import torch

import inkling_probe
from inkling_probe.errors import ProbeError

pytestmark = pytest.mark.cuda


def test_cuda_tensors_round_trip_every_dtype(tmp_path):
    dev = torch.device("cuda")
    tensors = {
        "fp32": torch.randn(64, 128, device=dev),
        "bf16": torch.randn(600, 600, device=dev).bfloat16(),   # own dataset, through the ring
        "fp8": torch.randn(32, 32, device=dev).to(torch.float8_e4m3fn),
        "ids": torch.randint(0, 1000, (6, 4), device=dev),
    }
    with inkling_probe.recording(tmp_path / "d"):
        for step in range(2):
            inkling_probe.step()
            for key, t in tensors.items():
                inkling_probe.probe(key, t)
    d = inkling_probe.open(tmp_path / "d")
    for key, t in tensors.items():
        got = d.tensor(key, step=1)
        assert got.dtype == t.dtype and torch.equal(got.view(torch.uint8), t.cpu().view(torch.uint8)), key


def test_eager_probe_refuses_graph_capture(tmp_path):
    x = torch.randn(8, device="cuda")
    g = torch.cuda.CUDAGraph()
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.probe("warm", x)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s), pytest.raises(ProbeError, match="CUDA-graph capture"):
            with torch.cuda.graph(g):
                inkling_probe.probe("inside", x * 2)

"""inkling_model on a GPU: same logits as on the CPU, recording transparent, and its cost.

Prints the wall time of a recorded vs an unrecorded forward (kept in docs/GPU.md).
"""
import statistics
import time

import pytest
import torch

import inkling_probe
from inkling_model.checkpoint.synthetic import write_random_checkpoint
from inkling_model.config import InklingConfig
from inkling_model.model import InklingForCausalLM
from inkling_model.checkpoint.weights import load_checkpoint

pytestmark = pytest.mark.cuda


def _model(ckpt, dtype, device):
    config = InklingConfig.from_pretrained(ckpt)
    model = InklingForCausalLM(config, dtype=dtype)
    load_checkpoint(model, ckpt)
    return model.to(device).eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    config = InklingConfig.preset("tiny")
    write_random_checkpoint(config, root / "bf16", seed=0)
    write_random_checkpoint(config, root / "nvfp4", seed=0, quant="nvfp4")
    return root


@pytest.mark.parametrize("kind", ["bf16", "nvfp4"])
def test_gpu_logits_equal_cpu_in_fp32(checkpoints, kind):
    ids = torch.randint(0, 500, (24,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cpu = _model(checkpoints / kind, torch.float32, "cpu")(ids)
        gpu = _model(checkpoints / kind, torch.float32, "cuda")(ids.cuda()).cpu()
    rel = ((gpu - cpu).norm() / cpu.norm()).item()
    print(f"{kind}: GPU vs CPU fp32 logits rel_rms {rel:.2e}")
    assert rel < 1e-4


@pytest.mark.parametrize("kind", ["bf16", "nvfp4"])
def test_recording_is_transparent_and_its_cost(checkpoints, kind, tmp_path):
    model = _model(checkpoints / kind, torch.bfloat16, "cuda")
    ids = torch.randint(0, 500, (256,), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        plain = model(ids)
        with inkling_probe.recording(tmp_path / "d") as rec:
            recorded = model(ids)
            assert torch.equal(plain, recorded)  # probes on: bit-identical outputs
            times = {"plain": [], "recorded": []}
            for _ in range(5):
                inkling_probe.sink._RECORDER = None
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(ids)
                torch.cuda.synchronize()
                times["plain"].append(time.perf_counter() - t0)
                inkling_probe.sink._RECORDER = rec
                t0 = time.perf_counter()
                model(ids)
                torch.cuda.synchronize()
                times["recorded"].append(time.perf_counter() - t0)
        inkling_probe.step()
    d = inkling_probe.open(tmp_path / "d")
    assert torch.equal(d.tensor("logits", step=0).cuda(), plain)
    p, r = (statistics.median(v) for v in times.values())
    print(f"{kind} TP=1 bf16 256 tokens on {torch.cuda.get_device_name()}: forward {p * 1e3:.1f} ms, "
          f"recorded {r * 1e3:.1f} ms ({r / p:.1f}x, {len(d.keys())} keys)")

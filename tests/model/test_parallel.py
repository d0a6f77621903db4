"""Process groups, divide(), the spawn helper, and attention-DP equal to TP=1 request by request."""

import pytest
import torch
from safetensors.torch import save_file

from inkling_model import parallel
from inkling_model.config import InklingConfig
from inkling_model.layers.context import StepContext
from inkling_model.model import InklingForCausalLM

from hf_util import hf_model, native_state
from parity_util import build, rel_rms, run_dp_rank


def test_divide():
    assert parallel.divide(12, 4) == 3
    with pytest.raises(AssertionError, match="not divisible"):
        parallel.divide(10, 4)


def test_free_ports_differ_and_bind():
    import socket

    ports = {parallel.free_port() for _ in range(5)}
    assert len(ports) >= 4 and all(p > 1024 for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_heads_must_split():
    cfg = InklingConfig.preset("tiny")
    tp = parallel.Parallel(attn=parallel.Group(0, 3))
    with pytest.raises(ValueError, match="sliding-attention heads = 8 does not divide over an attention group of 3"):
        InklingForCausalLM(cfg, tp)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    cfg = InklingConfig.preset("tiny")
    path = str(tmp_path_factory.mktemp("dp") / "w.safetensors")
    save_file(native_state(hf_model(cfg, seed=3)), path)
    return cfg, path


REQUESTS = [[5, 9, 33, 7, 100, 2, 8, 11, 12, 400, 17], [300, 301, 3], [44] * 19, [1, 2, 3, 4, 5, 6, 7]]


def _singles(cfg, path):
    model = build(cfg.to_dict(), path, "fp32")
    with torch.no_grad():
        return [model(torch.tensor(r)) for r in REQUESTS]


def test_batched_requests_equal_single(weights):
    """Several requests in one forward (flattened tokens) equal each alone."""
    cfg, path = weights
    model = build(cfg.to_dict(), path, "fp32")
    ctx = StepContext([len(r) for r in REQUESTS])
    with torch.no_grad():
        batched = model(torch.tensor([t for r in REQUESTS for t in r]), ctx).split(ctx.seq_lens)
    for single, b in zip(_singles(cfg, path), batched):
        assert rel_rms(b, single) <= 1e-6


@pytest.mark.slow
def test_attention_dp_equals_tp1(weights):
    """Attention-DP over 2 ranks (each rank its own requests, experts sharded over both) = TP=1."""
    cfg, path = weights
    per_rank = parallel.spawn(run_dp_rank, 2, cfg.to_dict(), path, REQUESTS)
    got = {}
    for rank, (groups, outs) in enumerate(per_rank):
        assert groups == {"attn": (0, 1), "dp_peers": (rank, 2), "moe": (rank, 2)}
        for j, lg in enumerate(outs):
            got[rank + 2 * j] = lg
    singles = _singles(cfg, path)
    errs = [rel_rms(got[i], singles[i]) for i in range(len(REQUESTS))]
    print(f"\nattention-DP=2 vs TP=1 per request rel_rms: {[f'{e:.1e}' for e in errs]}")
    assert max(errs) <= 1e-5

"""The decode runtime (static KV/conv pool, slots, batched prefill then decode) equals today's
full-sequence forward; slots are reused cleanly; the runtime refuses what it cannot run."""

import pytest
import torch

from inkling_model.generate import generate
from inkling_model.layers.kv_cache import KVPool
from inkling_model.runtime.runtime import Runtime

from graph_util import tiny_model
from parity_util import rel_rms


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def _full_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids))  # [T, V]


def test_pool_shapes_full_and_sliding(model):
    pool = KVPool(model, num_slots=3, max_len=40)
    cfg = model.config
    for i in range(cfg.num_hidden_layers):
        size = pool.k[i].shape[1]
        assert size == (40 if not cfg.is_sliding(i) else cfg.attn_dims(i)[4]), i
        assert pool.k[i].shape[0] == 4  # 3 slots + scratch
    assert len(pool.conv) == 4 * cfg.num_hidden_layers
    # the ring: after writing position 10 in a window of 8, index j holds 10 - ((10 - j) mod 8)
    sliding = next(i for i in range(cfg.num_hidden_layers) if cfg.is_sliding(i))
    kp = pool.key_positions(sliding, torch.tensor([10, 2]))
    assert kp[0].tolist() == [8, 9, 10, 3, 4, 5, 6, 7]
    assert kp[1].tolist() == [0, 1, 2, -5, -4, -3, -2, -1]


def test_batched_prefill_then_decode_equals_full_forward(model):
    """Three requests of different lengths, decoded past the window (8) and rel_extent (16)."""
    prompts = [[5, 77, 300, 12, 9], [1, 2, 3], list(range(40, 51))]
    rt = Runtime(model, max_batch=4, max_len=32, cuda_graph=False)
    slots, logits = rt.prefill(prompts)
    seqs = [list(p) for p in prompts]
    got = [[row] for row in logits]
    g = torch.Generator().manual_seed(0)
    for _ in range(14):
        toks = torch.randint(0, model.config.vocab_size, (3,), generator=g).tolist()
        out = rt.decode(toks, slots)
        for r in range(3):
            seqs[r].append(toks[r])
            got[r].append(out[r])
    for r in range(3):
        full = _full_logits(model, seqs[r])[len(prompts[r]) - 1:]  # logits of the prefill's last and each decode token
        assert rel_rms(torch.stack(got[r]), full) <= 1e-5, r


def test_generate_equals_eager_generate_and_slots_reuse(model):
    prompts = [[5, 77, 300, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    ref = [g.tokens for g in generate(model, prompts, 12)]
    rt = Runtime(model, max_batch=2, max_len=32, cuda_graph=False)
    assert [g.tokens for g in rt.generate(prompts, 12)] == ref
    assert sorted(rt.pool.free) == [0, 1]
    assert [g.tokens for g in rt.generate(prompts[::-1], 12)] == ref[::-1]  # reused slots start clean


def test_refusals(model):
    with pytest.raises(ValueError, match="CUDA"):
        Runtime(model, cuda_graph=True)
    rt = Runtime(model, max_batch=1, max_len=8, cuda_graph=False)
    with pytest.raises(ValueError, match="1 to 7 tokens"):
        rt.prefill([list(range(9))])
    rt.prefill([[1, 2]])
    with pytest.raises(RuntimeError, match="pool full"):
        rt.prefill([[3]])


def _tp_rank(rank, world):
    """One rank of a TP runtime per strategy: prefill two requests, then 6 decode steps with fixed tokens."""
    from inkling_model import allreduce, parallel
    from inkling_model.checkpoint.synthetic import random_tensors
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_tensors

    from test_allreduce import tp2_sums

    sums = tp2_sums(rank, world) if world > 1 else None
    cfg = InklingConfig.preset("tiny")
    model = InklingForCausalLM(cfg, parallel.init())
    load_tensors(model, random_tensors(cfg, 3), cfg)
    out = {}
    for strategy in ("nccl", "oneshot"):
        with allreduce.use(strategy):
            rt = Runtime(model, max_batch=2, max_len=32, cuda_graph=False)
            slots, logits = rt.prefill([[5, 77, 300, 12, 9], [1, 2, 3]])
            steps = []
            for t in range(6):
                steps.append(logits)
                logits = rt.decode([t + 10, t + 20], slots)
            out[strategy] = torch.stack(steps)
    return {"runtime": out, "sums": sums}


@pytest.mark.slow
def test_tp2_runtime_equals_tp1_for_both_strategies():
    """Two gloo ranks (one spawn for both checks): the all-reduce strategies' sums (test_allreduce),
    and the runtime, whose pool holds each rank's kv heads, equal to TP=1 with nccl and oneshot."""
    from inkling_model.parallel import spawn
    from test_allreduce import check_tp2_sums

    ref = _tp_rank(0, 1)["runtime"]["nccl"]
    r0, r1 = spawn(_tp_rank, 2)
    check_tp2_sums(r0["sums"], r1["sums"])
    r0, r1 = r0["runtime"], r1["runtime"]
    for strategy in ("nccl", "oneshot"):
        assert torch.equal(r0[strategy], r1[strategy]), strategy
        assert rel_rms(r0[strategy], ref) <= 1e-5, strategy


def test_chunked_prefill_into_one_slot_equals_full_forward(model):
    """A request continued by chunks longer than one token (one of them longer than the sliding window,
    8): each chunk reads its past keys from the slot and writes its own (the ring keeps the last 8)."""
    from inkling_model.layers.context import StepContext

    ids = torch.randint(0, model.config.vocab_size, (30,), generator=torch.Generator().manual_seed(1))
    pool = KVPool(model, num_slots=2, max_len=32)
    other, cache = pool.new_request(), pool.new_request()  # slot 1: slot 0 must stay untouched
    with torch.no_grad():
        got = [model(ids[a:b], StepContext([b - a], [cache])) for a, b in ((0, 5), (5, 15), (15, 18), (18, 19), (19, 30))]
    assert cache.length == 30 and other.length == 0
    assert all(float(t[other.slot].abs().max()) == 0 for t in (*pool.k.values(), *pool.conv.values()))
    assert rel_rms(torch.cat(got), _full_logits(model, ids.tolist())) <= 1e-5
    before = [t.clone() for t in pool.k.values()]
    with pytest.raises(ValueError, match="request of 33 tokens exceeds the pool's max_len 32"):
        model(ids[:3], StepContext([3], [cache]))  # refused before any layer writes
    assert all(torch.equal(a, b) for a, b in zip(before, pool.k.values()))

"""Graph runner logic that needs no GPU: batch-size choice and padding, and recording that changed
after capture (an error, never a silent gap). The captures themselves: test_graphs_cuda.py."""
import pytest
import torch

import inkling_probe
from inkling_model.runtime.graphs import GraphRunner, StaticInputs


def _runner(sizes=(1, 2, 4, 8)):
    r = GraphRunner.__new__(GraphRunner)  # no capture: CPU
    r.batch_sizes, r.recording = list(sizes), None
    return r


def test_graph_size_and_padding():
    r = _runner()
    assert [r.graph_size(n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError, match="exceed the largest captured batch 8"):
        r.graph_size(9)
    inp = StaticInputs(8, scratch_slot=6, device="cpu")
    inp.fill([11, 12, 13], [0, 3, 1], [5, 9, 2], bs=4)
    assert inp.ids[:4].tolist() == [11, 12, 13, 0]
    assert inp.slots[:4].tolist() == [0, 3, 1, 6]  # the padded row decodes into the scratch slot
    assert inp.positions[:4].tolist() == [5, 9, 2, 0]


def test_recording_changed_after_capture_is_an_error(tmp_path):
    from inkling_probe.graphs.session import InGraphRecording

    r = _runner()
    assert r._recording() is None  # no recording, no probes: fine
    with inkling_probe.recording(tmp_path / "a", writer="inline"):
        with pytest.raises(RuntimeError, match="captured without probes"):
            r._recording()
    with inkling_probe.recording(tmp_path / "b", writer="inline") as rec:
        r.recording = InGraphRecording(rec, "cpu")
        assert r._recording() is r.recording
    assert r._recording() is None  # recording stopped: replays go on without draining
    with inkling_probe.recording(tmp_path / "c", writer="inline"):
        with pytest.raises(RuntimeError, match="new recording started"):
            r._recording()


@pytest.mark.parametrize("quant", [None, "nvfp4"])
def test_decode_step_has_no_data_dependent_op(quant):
    """The decode step (bf16 and NVFP4 routed experts) runs on the meta device, where a data-dependent
    op (unique, nonzero, .item(), .tolist(): a host sync, which capture forbids) cannot; prefill's
    grouped experts (torch.unique) cannot, so the check can fail."""
    from inkling_model.config import InklingConfig
    from inkling_model.layers.kv_cache import KVPool
    from inkling_model.model import InklingForCausalLM
    from inkling_model.runtime.graphs import decode_step

    cfg = InklingConfig.preset("tiny", quant_method=quant)
    with torch.device("meta"):
        model = InklingForCausalLM(cfg, dtype=torch.bfloat16)
    pool = KVPool(model, 2, 16, device="meta")
    out = decode_step(model, StaticInputs(2, pool.scratch, "meta"), pool, 2, "graph")
    assert out.shape == (2, cfg.logits_vocab_size) and out.is_meta
    with pytest.raises(NotImplementedError, match="unique"):
        model(torch.zeros(3, dtype=torch.long, device="meta"))


class _FakePeers:
    """A dp group of 2 seen from rank 0 in one process: the peer's tensors come from ``peer(t)``."""

    def __init__(self, peer):
        self.rank, self.size, self.group, self.peer = 0, 2, None, peer

    def all_gather(self, x, dim):
        return torch.cat([x, self.peer(x)], dim)

    def all_gather_sizes(self, n, device=None):
        return [int(v) for v in self.all_gather(torch.tensor([n], device=device), 0).tolist()]

    def all_reduce(self, x):
        return x


def _dp_model(quant, device, peer):
    """The tiny model as rank 0 of DP 2 x TP 1 whose collectives are ``_FakePeers(peer)``."""
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.parallel import Parallel

    cfg = InklingConfig.preset("tiny", quant_method=quant)
    fake = _FakePeers(peer)
    tp = Parallel(world=fake, attn=Parallel().attn, dp_peers=fake)
    with torch.device(device):
        return InklingForCausalLM(cfg, tp, dtype=torch.bfloat16), cfg


@pytest.mark.parametrize("quant", [None, "nvfp4"])
def test_dp_decode_step_has_no_data_dependent_op(quant):
    """Under attention-DP the padded decode step (the graph's) gathers with fixed sizes: it runs on the
    meta device (no .item(), .tolist(), nonzero: no host sync inside capture); the eager step's sized
    gather cannot (host-side sizes), so the check can fail."""
    from inkling_model.layers.kv_cache import KVPool
    from inkling_model.runtime.graphs import decode_step

    model, cfg = _dp_model(quant, "meta", torch.empty_like)
    pool = KVPool(model, 2, 16, device="meta")
    inputs = StaticInputs(2, pool.scratch, "meta")
    out = decode_step(model, inputs, pool, 2, "graph")
    assert out.shape == (2, cfg.logits_vocab_size) and out.is_meta
    with pytest.raises((NotImplementedError, RuntimeError), match="meta|item|data"):
        decode_step(model, inputs, pool, 2, "static-eager")  # the eager runtime's step: sized gather


@pytest.mark.parametrize("quant", [None, "nvfp4"])
def test_dp_padding_rows_change_no_real_row(quant):
    """The fixed gather masks padding: the peer group's rows past its count (here NaN and huge values)
    enter the experts as zeros with no expert and weight 0, so they add exactly zero; this group's
    real rows equal a clean peer's, and its own padding row's routed sum is zero."""
    from inkling_model.layers.moe import PAD_EXPERT
    from inkling_model.layers.context import StepContext

    def garbage(t):  # the peer: row 0 real (a copy of ours), row 1 padding full of garbage
        g = t.clone()
        if g.is_floating_point():
            g[1:] = float("nan") if g.dim() > 1 and g.shape[-1] > 8 else 1e30
        else:
            g[1:] = 3  # expert ids of a padding row: whatever the router said
        return g

    outs = {}
    for name, peer in (("clean", lambda t: t.clone()), ("garbage", garbage)):
        model, cfg = _dp_model(quant, "cpu", peer)
        _fill(model)
        moe = next(layer.mlp for layer in model.eval().layers if hasattr(layer.mlp, "experts"))
        seen = []
        moe.experts.register_forward_hook(lambda m, args, out: seen.append((args, out)))
        x = torch.randn(2, cfg.hidden_size, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
        ctx = StepContext.for_decode(None, torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long),
                                     valid_rows=torch.tensor([1]))
        with torch.no_grad():
            outs[name] = moe._routed(x, *reversed(moe.gate(x)[1:3]), ctx)
        (xs, idx, w), out = seen[0]  # the experts' [dp*B] rows: ours 0-1, the peer's 2-3; 1 and 3 padding
        assert (idx[[1, 3]] == PAD_EXPERT).all() and not w[[1, 3]].any() and not xs[[1, 3]].any()
        assert not out[[1, 3]].any()  # exactly zero (the garbage row unmasked: NaN)
    assert torch.isfinite(outs["garbage"]).all()
    assert torch.equal(outs["garbage"], outs["clean"])
    assert torch.equal(outs["clean"][1], torch.zeros_like(outs["clean"][1]))  # our padding row: zero


def _fill(model) -> None:
    """Deterministic random parameters of any format (packed fp4 bytes, fp8 and positive fp32 scales)."""
    gen = torch.Generator().manual_seed(3)
    for p in model.parameters():
        if p.dtype == torch.uint8:
            p.data.copy_(torch.randint(0, 256, p.shape, generator=gen, dtype=torch.uint8))
        elif p.dim() == 1 or p.dtype == torch.float8_e4m3fn:
            p.data.copy_((torch.rand(p.shape, generator=gen) * 0.5 + 0.1).to(p.dtype))
        else:
            p.data.copy_((torch.randn(p.shape, generator=gen) * 0.05).to(p.dtype))


def test_dp_groups_must_capture_the_same_sizes():
    """Under attention-DP the groups' warm-ups and replays run collectives together: a group whose
    runtime would capture other batch sizes is refused at capture (one line, every rank), not a hang."""
    from inkling_model.layers.kv_cache import KVPool

    model, _ = _dp_model(None, "cpu", lambda t: t + 1 if t.dtype == torch.long and t.shape == (2,) else t.clone())
    pool = KVPool(model, 2, 16)
    with pytest.raises(ValueError, match=r"groups would capture different batch sizes \(sizes per group: \[\[1, 2\], \[2, 3\]\]"):
        GraphRunner(model, pool, 2, (1, 2), capture=False).capture()
    model, _ = _dp_model(None, "cpu", lambda t: t + 1 if t.dtype == torch.long and t.shape == (1,) else t.clone())
    with pytest.raises(ValueError, match=r"\(how many per group: \[2, 3\]\)"):
        GraphRunner(model, KVPool(model, 2, 16), 2, (1, 2), capture=False).capture()


def test_dp_sizes_are_compared_element_by_element():
    """Two groups' batch sizes of the same count, largest and sum ({1, 4, 5, 10} and {2, 3, 5, 10}) are
    still different sizes (a group of 2 rows would replay 4, the other 2: the fixed gathers would not
    match): refused, not passed on a summary."""
    from inkling_model.layers.kv_cache import KVPool

    def peer(t):
        if t.dtype == torch.long and t.tolist() == [1, 4, 5, 10]:
            return torch.tensor([2, 3, 5, 10])
        return t.clone()

    model, _ = _dp_model(None, "cpu", peer)
    with pytest.raises(ValueError, match=r"\[\[1, 4, 5, 10\], \[2, 3, 5, 10\]\]"):
        GraphRunner(model, KVPool(model, 10, 16), 10, (1, 4, 5), capture=False).capture()

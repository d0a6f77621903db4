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

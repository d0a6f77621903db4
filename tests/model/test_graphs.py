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

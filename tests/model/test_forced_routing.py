"""forced_routing: the n-th forward takes the reference dump's n-th step of top-k ids, per layer."""
import numpy as np
import pytest
import torch

from dumps import write
from inkling_model.switches import forced_routing
from inkling_model.switches.forced_routing import ForcedRouting


def test_takes_the_references_ids_step_by_step(tmp_path, monkeypatch):
    a = torch.tensor([[0, 1], [2, 3], [4, 5]])
    steps = [[("layers.2.mlp.topk_idx", a), ("layers.3.mlp.topk_idx", a + 1)],
             [("layers.2.mlp.topk_idx", a[:1] + 2), ("layers.3.mlp.topk_idx", a[:1] + 3)]]
    path = write(tmp_path / "ref", steps)
    f = ForcedRouting(path)
    assert np.array_equal(f.take(2, 3), a.numpy()) and np.array_equal(f.take(3, 3), a.numpy() + 1)
    assert np.array_equal(f.take(2, 1), a[:1].numpy() + 2)  # layer 2 again: the next forward
    with pytest.raises(ValueError, match="3 token rows|1 token rows"):
        f.take(3, 3)
    monkeypatch.setenv(forced_routing.ENV, path)
    forced_routing.reset()
    assert forced_routing.active() is not None


def test_a_dump_without_ids_is_an_error(tmp_path):
    path = write(tmp_path / "ref", [[("embed", torch.zeros(2, 4))]])
    with pytest.raises(ValueError, match="no layers"):
        ForcedRouting(path)

"""Every recorded step says how it ran (the runtime's ``forward`` step meta), on the CPU through the
decode runtime's static-buffer eager path; graphdiff refuses a pair whose graph side replayed nothing
(issue 22: two eager runs printed "graph replay equals eager ... bit-identical", exit 0)."""
import pytest
import torch

import inkling_probe
from inkling_model.generate import generate
from inkling_model.runtime.runtime import Runtime
from inkling_probe.graphs.diff import graph_vs_eager
from inkling_probe.graphs.forward import NotAGraphPair, how_steps_ran

from graph_util import tiny_model

PROMPT = [5, 77, 300, 12, 9, 4]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    model, root = tiny_model(), tmp_path_factory.mktemp("fwd")
    with inkling_probe.recording(str(root / "static"), writer="inline"), torch.no_grad():
        Runtime(model, max_batch=2, max_len=32, cuda_graph=False, enforce_eager=True).generate([PROMPT], 3)
    with inkling_probe.recording(str(root / "plain"), writer="inline"), torch.no_grad():
        generate(model, [PROMPT], 3)
    return {k: str(root / k) for k in ("static", "plain")}


def test_steps_say_how_they_ran(dumps):
    ran = how_steps_ran(inkling_probe.open(dumps["static"]))
    assert ran == {0: {"eager"}, 1: {"static-eager"}, 2: {"static-eager"}}
    assert how_steps_ran(inkling_probe.open(dumps["plain"])) == {0: {"eager"}, 1: {"eager"}, 2: {"eager"}}


def test_graphdiff_refuses_two_eager_runs(dumps):
    with pytest.raises(NotAGraphPair, match=r"graph side .*: no step replayed a CUDA graph "
                                            r"\(step 0 eager, steps 1-2 static-eager\)"):
        graph_vs_eager(dumps["plain"], dumps["static"])

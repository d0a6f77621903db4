"""dynamo's own counters around a block: graph breaks (with their reasons), graphs, frames compiled, and
the graphs Inductor ran without the CUDA graphs their mode asked for.

A frame compiled again inside the block is a recompile; a graph break splits a frame into several
graphs and runs what lies between eagerly. The counters are dynamo's (``torch._dynamo.utils.counters``),
read before and after: nothing here infers them.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field


@dataclass
class Compiled:
    """What dynamo did inside a :func:`watch` block."""

    graph_breaks: int = 0
    break_reasons: dict = field(default_factory=dict)  # reason -> count
    graphs: int = 0  # graphs compiled (unique_graphs)
    frames: int = 0  # frames dynamo converted (a frame converted twice is a recompile)
    cudagraph_skips: int = 0  # graphs Inductor ran without CUDA graphs although the mode asked for them

    def to_dict(self) -> dict:
        return {"graph_breaks": self.graph_breaks, "break_reasons": self.break_reasons,
                "graphs": self.graphs, "frames": self.frames, "cudagraph_skips": self.cudagraph_skips}

    def summary(self) -> str:
        return f"{self.graph_breaks} graph break(s), {self.graphs} graph(s) compiled in {self.frames} frame(s)"


def _snapshot() -> tuple[dict, int, int, int]:
    from torch._dynamo.utils import counters

    return (dict(counters["graph_break"]), counters["stats"]["unique_graphs"], counters["frames"]["total"],
            counters["inductor"]["cudagraph_skips"])


@contextlib.contextmanager
def watch():
    """Yield a :class:`Compiled` filled in when the block ends (also when it raises)."""
    out = Compiled()
    breaks0, graphs0, frames0, skips0 = _snapshot()
    try:
        yield out
    finally:
        breaks1, graphs1, frames1, skips1 = _snapshot()
        out.break_reasons = {k: v - breaks0.get(k, 0) for k, v in breaks1.items() if v > breaks0.get(k, 0)}
        out.graph_breaks = sum(out.break_reasons.values())
        out.graphs, out.frames, out.cudagraph_skips = graphs1 - graphs0, frames1 - frames0, skips1 - skips0

"""How each recorded step ran, from the ``forward`` meta the model runtime stores with every probe.

``eager`` (a plain forward: the prefill), ``static-eager`` (a decode step over the runtime's static
buffers, no graph), ``graph`` (a CUDA-graph replay; ``graph_bs`` the batch size the graph was captured
for). A step without the meta ran somewhere that does not say (``unstated``): graphdiff takes no
graph replay on trust, so a graph side must show at least one ``graph`` step, and an eager side none.
"""
from __future__ import annotations

from collections import defaultdict

from inkling_probe.errors import ProbeError

FORWARD = "forward"  # the meta key
GRAPH = "graph"
UNSTATED = "unstated"


class NotAGraphPair(ProbeError):
    """The graph side replayed no graph, or the eager side replayed one: the comparison would mean nothing."""


def how_steps_ran(dump, steps=None) -> dict[int, set[str]]:
    """step -> how it ran (``eager``, ``static-eager``, ``graph bs=N``, ``unstated``), from the index."""
    ran: dict[int, set[str]] = defaultdict(set)
    for row in dump.index:
        if steps is None or row["step"] in steps:
            ran[row["step"]].add(_label(row.get("meta") or {}))
    return dict(sorted(ran.items()))


def _label(meta: dict) -> str:
    forward = meta.get(FORWARD) or UNSTATED
    return f"{GRAPH} bs={meta.get('graph_bs', '?')}" if forward == GRAPH else str(forward)


def graph_steps(ran: dict[int, set[str]]) -> list[int]:
    """The steps any rank of which recorded from a graph replay."""
    return [s for s, how in ran.items() if any(h.startswith(GRAPH) for h in how)]


def describe(ran: dict[int, set[str]]) -> str:
    """``step 0 eager, steps 1-3 graph bs=1``: runs of consecutive steps that ran the same way."""
    parts: list[tuple[list[int], str]] = []
    for s, how in ran.items():
        label = "+".join(sorted(how))
        if parts and parts[-1][1] == label and parts[-1][0][-1] == s - 1:
            parts[-1][0].append(s)
        else:
            parts.append(([s], label))
    return ", ".join(f"step {s[0]} {label}" if len(s) == 1 else f"steps {s[0]}-{s[-1]} {label}"
                     for s, label in parts) or "no steps"


def check_pair(eager, graph, steps=None) -> dict:
    """Raise :class:`NotAGraphPair` (one line) unless ``graph`` (a Dump) replayed a graph at some of
    ``steps`` and ``eager`` replayed none; returns ``{"steps", "graph_bs", "graph_side", "eager_side"}``."""
    g_ran, e_ran = how_steps_ran(graph, steps), how_steps_ran(eager, steps)
    replayed = graph_steps(g_ran)
    if not replayed:
        raise NotAGraphPair(f"graph side {graph.path}: no step replayed a CUDA graph ({describe(g_ran)}); "
                            "record it with graphs on (INKLING_CUDA_GRAPH=1, `run --cuda-graph`)")
    wrong = graph_steps(e_ran)
    if wrong:
        raise NotAGraphPair(f"eager side {eager.path}: steps {wrong} replayed a CUDA graph ({describe(e_ran)}); "
                            "record it eagerly (INKLING_ENFORCE_EAGER=1)")
    sizes = sorted({h.split("=")[1] for s in replayed for h in g_ran[s] if h.startswith(GRAPH)}, key=str)
    sizes = [int(b) if b.isdigit() else b for b in sizes]
    return {"steps": replayed, "graph_bs": sizes, "graph_side": describe(g_ran), "eager_side": describe(e_ran)}

"""Count the nodes of a captured CUDA graph from its debug dump (``cudaGraphDebugDotPrint``).

The graph must have been created with ``enable_debug_mode()`` before capture.
"""
from __future__ import annotations

import os
import re
import tempfile
from collections import Counter

_NODE = re.compile(r'^"?(\w*node_?\d+)"?\s*\[(.*)$')


def node_kinds(dot_text: str) -> Counter:
    """Node count by kind (kernel, memcpy, memset, ...) in a graph's DOT dump."""
    kinds: Counter = Counter()
    seen = set()
    for line in dot_text.splitlines():
        m = _NODE.match(line.strip())
        if m and m.group(1) not in seen:
            seen.add(m.group(1))
            attrs = m.group(2).lower()
            kind = next((k for k in ("memcpy", "memset", "kernel", "event", "host") if k in attrs), "other")
            kinds[kind] += 1
    return kinds


def replay_events(graph) -> int:
    """GPU activities (kernels, copies, memsets) the profiler sees during one replay: a second witness."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))


def count_nodes(graph) -> Counter:
    """Node kinds of a captured ``torch.cuda.CUDAGraph`` (created in debug mode); ``total`` included."""
    with tempfile.TemporaryDirectory(prefix="inkling_graph_") as d:
        path = os.path.join(d, "graph.dot")
        graph.debug_dump(path)
        with open(path) as f:
            text = f.read()
        kinds = node_kinds(text)
    kinds["total"] = sum(kinds.values())
    if not kinds["total"]:
        raise RuntimeError(f"no node found in the graph's debug dump (format?): {text[:300]!r}")
    return kinds

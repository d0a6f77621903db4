"""``compile.json`` in a dump folder: how a compiled recording ran, and whether recording moved its outputs.

Written by :func:`inkling_probe.compiled.session.record_compiled` after the dump closes; read by
``ls``, compilediff and the record summary. Plain JSON (no torch), so readers stay light::

    {"backend": "inductor", "mode": "reduce-overhead",
     "off": {dynamo counters of the run with probes off}, "on": {... of the recorded run},
     "observer": {"identical": true, "max_abs": 0.0, "rel_rms": 0.0, "differ": 0, "numel": 2048, "dtype": "bf16"},
     "cudagraph": {"replayed": 111}}   (CUDA-graph modes only: tensors drained from the recorded replay)
"""
from __future__ import annotations

import json
from pathlib import Path

FILE = "compile.json"


def write(dump, facts: dict) -> None:
    """Store ``facts`` beside the dump's segments."""
    (Path(dump) / FILE).write_text(json.dumps(facts, indent=1, sort_keys=True))


def read(dump) -> dict | None:
    """The dump's compile facts, or None for a dump that was not recorded compiled."""
    path = Path(dump) / FILE
    return json.loads(path.read_text()) if path.is_file() else None


def lines(facts: dict) -> list[str]:
    """Two lines for people: how it compiled (the recorded run's counters) and the observer effect."""
    from inkling_probe.compiled.observer import describe

    on = facts.get("on", {})
    mode = f" mode={facts['mode']}" if facts.get("mode") else ""
    graphs = cuda_graph_line(facts)
    return [f"compiled: backend={facts.get('backend')}{mode}; recorded run: {on.get('graph_breaks', '?')} graph "
            f"break(s), {on.get('graphs', '?')} graph(s) in {on.get('frames', '?')} frame(s)",
            *([graphs] if graphs else []), describe(facts.get("observer"))]


def cuda_graph_line(facts: dict) -> str | None:
    """Under a CUDA-graph mode: how many tensors came from a graph replay (None for other modes)."""
    found = facts.get("cudagraph")
    if found is None:
        return None
    skips = facts.get("on", {}).get("cudagraph_skips", 0)
    if found.get("replayed"):
        return f"CUDA graphs: {found['replayed']} tensors recorded from a graph replay (drained after the call)"
    return (f"CUDA graphs: none replayed; Inductor ran {skips} graph(s) without the CUDA graphs the mode asked "
            "for (its reason is in its log: TORCH_LOGS=cudagraphs)")

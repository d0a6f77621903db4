"""Compiled vs eager: the first probe point where a compiled run departs beyond what its dtype allows.

The judgement is compare's: ``compare(eager, compiled, control)`` with the eager run as reference and,
when given, a control (e.g. the eager run in the compiled run's dtype against an fp32 reference, the
floor of what that dtype allows; without one, compare's dtype-aware defaults). Bit-exactness is not
expected: Inductor keeps fp32 inside fusions.

Before anything is compared, :func:`check_pair` checks what ran: every row of the compiled side must
have been recorded through the compiled graph's op (meta ``compiled``), its recorded run without a
graph break (compile.json), and the eager side must hold no such row. A compiled side that ran eager,
wholly or in part, is refused with its graph breaks counted: its all-clear would rest on nothing.
:func:`check_keys` then checks that both sides recorded the same probe points (key, step): a point
one side holds and the other lacks is never judged, so a partial dump (a leftover eager recording,
a narrower include on one side) is refused with the count and a few of the missing points.
"""
from __future__ import annotations

from dataclasses import dataclass

from inkling_probe.compiled import facts as _facts
from inkling_probe.tracing.keys import TRACED
from inkling_probe.errors import ProbeError


class NotACompiledPair(ProbeError):
    """The compiled side ran (partly) eager, or the eager side was compiled: nothing to judge."""


def _traced(dump) -> tuple[int, int]:
    rows = dump.index
    return sum((r.get("meta") or {}).get(TRACED) == 1 for r in rows), len(rows)


def check_pair(eager, compiled) -> dict:
    """Raise :class:`NotACompiledPair` (one line) unless ``compiled`` ran compiled and ``eager`` did not;
    returns ``{"backend", "mode", "graph_breaks", "traced", "rows", "observer"}``."""
    traced, rows = _traced(compiled)
    found = _facts.read(compiled.path) or {}
    breaks = found.get("on", {}).get("graph_breaks")
    if traced < rows or breaks:
        shown = "unknown (no compile.json)" if breaks is None else breaks
        raise NotACompiledPair(f"compiled side {compiled.path}: ran eager: {rows - traced} of {rows} tensors were "
                               f"recorded outside a compiled graph, graph breaks {shown}; compilediff judges "
                               "only a program that ran compiled")
    e_traced, e_rows = _traced(eager)
    if e_traced:
        raise NotACompiledPair(f"eager side {eager.path}: {e_traced} of {e_rows} tensors were recorded in a "
                               "compiled graph; record it without torch.compile")
    return {"backend": found.get("backend"), "mode": found.get("mode"), "graph_breaks": breaks,
            "traced": traced, "rows": rows, "observer": found.get("observer"),
            "cuda_graphs": _facts.cuda_graph_line(found)}


SHOWN = 3  # missing points named in the refusal


def _points(dump) -> list[tuple[str, int]]:
    """The dump's (key, step) points in recording order, each once."""
    return list(dict.fromkeys((r["key"], r["step"]) for r in dump.index))


def check_keys(eager, compiled) -> None:
    """Raise :class:`NotACompiledPair` (one line) unless both sides recorded the same (key, step) points."""
    e_points, c_points = _points(eager), _points(compiled)
    e_set, c_set = set(e_points), set(c_points)
    for side, dump, held, other, other_points in (("eager", eager, e_set, "compiled", c_points),
                                                  ("compiled", compiled, c_set, "eager", e_points)):
        missing = [p for p in other_points if p not in held]
        if missing:
            shown = ", ".join(f"{k}@{s}" for k, s in missing[:SHOWN]) + (", ..." if len(missing) > SHOWN else "")
            raise NotACompiledPair(f"{side} side {dump.path}: lacks {len(missing)} of the {len(other_points)} "
                                   f"probe points the {other} side recorded ({shown}); a point one side lacks is "
                                   "never judged: record both sides of the same run, with the same include/exclude")


@dataclass
class CompileDiff:
    """The verdict: the first divergent probe point (None: within what the dtype allows) and what ran."""

    eager: str
    compiled: str
    ran: dict
    judged: int
    first: dict | None = None

    @property
    def diverged(self) -> bool:
        return self.first is not None

    def to_dict(self) -> dict:
        return {"eager": self.eager, "compiled": self.compiled, "diverged": self.diverged, "judged": self.judged,
                "first_divergence": self.first, "ran": self.ran}

    def summary(self) -> str:
        from inkling_probe.compiled.observer import describe

        r = self.ran
        graphs = f"\n{r['cuda_graphs']}" if r.get("cuda_graphs") else ""
        ran = (f"compiled side: backend={r['backend']} mode={r['mode']}, {r['graph_breaks']} graph breaks, "
               f"{r['traced']} of {r['rows']} tensors recorded in the compiled graph{graphs}\n{describe(r['observer'])}")
        if self.first is None:
            return f"compiled equals eager within what its dtype allows at every probe point: {self.judged} tensors judged\n{ran}"
        f = self.first
        return f"first divergent point: {f['key']} at step {f['step']} (rel_rms {f['error']:.3g})\n{ran}"


def compiled_vs_eager(eager, compiled, control=None, threshold: float | None = None) -> CompileDiff:
    """Judge dump ``compiled`` against dump ``eager`` through compare (``control``: the floor's pair)."""
    from inkling_probe.compare import compare
    from inkling_probe.store.reader import as_dump

    eager, compiled = as_dump(eager), as_dump(compiled)
    ran = check_pair(eager, compiled)
    check_keys(eager, compiled)
    report = compare(eager, compiled, control=control, threshold=threshold, explain=False)
    rows = [r for r in report.rows if r.against == "reference"]
    out = CompileDiff(str(report.ref), str(report.cand), ran, judged=len(rows))
    first = report.first_divergence
    if first is not None:
        out.first = {"key": first.key, "step": first.step, "call": first.call, "error": first.error}
    return out

"""Graph vs eager: record the same decode steps eagerly and from graph replays, then name the first
probe point whose replayed value differs from its eager value (through compare).

The toolkit knows nothing of the model: :func:`record_pair` runs a command twice, once with
``INKLING_ENFORCE_EAGER=1`` (the eager side) and once with it ``0``, each recording into its own
dump (``{dump}`` in the command is replaced by the dump path), through the toolkit's one command
runner (:mod:`inkling_probe.procs`).
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

EAGER_ENV = "INKLING_ENFORCE_EAGER"


@dataclass
class GraphDiff:
    """The verdict: the first divergent probe point (None: replay equals eager) and the counts."""

    eager: str
    graph: str
    first: dict | None = None  # {"key", "step", "call", "error", "cand_nan", "cand_inf", "ref_nan", ...}
    rows: int = 0
    exact: int = 0
    steps: list[int] = field(default_factory=list)
    ran: dict = field(default_factory=dict)  # forward.check_pair: the replayed steps and graph batch sizes

    @property
    def diverged(self) -> bool:
        return self.first is not None

    def to_dict(self) -> dict:
        return {"eager": self.eager, "graph": self.graph, "diverged": self.diverged, "first_divergence": self.first,
                "rows": self.rows, "exact": self.exact, "steps": self.steps, "ran": self.ran}

    def summary(self) -> str:
        ran = (f"\ngraph side: {self.ran['graph_side']}\neager side: {self.ran['eager_side']}"
               if self.ran else "")
        if self.first is None:
            return (f"graph replay equals eager at every probe point: {self.exact} of {self.rows} tensors "
                    f"bit-identical, steps {self.steps}{ran}")
        f = self.first
        nonfinite = f.get("cand_nan", 0) + f.get("cand_inf", 0)
        what = f"{nonfinite} non-finite values in the replay" if nonfinite else f"rel_rms {f['error']:.3g}"
        return f"first divergent point: {f['key']} at step {f['step']} ({what}){ran}"


def graph_vs_eager(eager, graph, threshold: float = 0.0, steps=None) -> GraphDiff:
    """Compare a graph-replay dump against the eager dump of the same steps (paths or open dumps).

    ``threshold`` 0: any difference diverges (the deterministic path must be bit-identical). Raises
    :class:`~inkling_probe.graphs.forward.NotAGraphPair` first when the graph side replayed no graph
    at these steps or the eager side replayed one (the steps' ``forward`` meta; graphs/forward.py).
    """
    from inkling_probe.compare import compare
    from inkling_probe.graphs.forward import check_pair
    from inkling_probe.store.reader import as_dump

    eager, graph = as_dump(eager), as_dump(graph)
    ran = check_pair(eager, graph, steps)
    report = compare(eager, graph, threshold=threshold, steps=steps, explain=False)
    rows = [r for r in report.rows if r.against == "reference"]
    out = GraphDiff(str(report.ref), str(report.cand), rows=len(rows),
                    exact=sum(r.status == "exact" for r in rows), steps=sorted({r.step for r in rows}), ran=ran)
    first = report.first_divergence
    if first is not None:
        m = first.metrics
        out.first = {"key": first.key, "step": first.step, "call": first.call, "error": first.error,
                     "cand_nan": getattr(m, "cand_nan", 0), "cand_inf": getattr(m, "cand_inf", 0),
                     "ref_nan": getattr(m, "ref_nan", 0), "ref_inf": getattr(m, "ref_inf", 0)}
    return out


def record_pair(command: str, out_dir, env_var: str = EAGER_ENV, timeout: float | None = None) -> tuple[str, str]:
    """Run ``command`` eagerly and with graphs; returns (eager dump, graph dump) under ``out_dir``.

    Each side runs through the toolkit's one command runner (:func:`inkling_probe.procs.run`, as
    bisect's trials do): a process group of its own, its output in ``<side>-output.txt`` beside the
    dumps, the whole group killed past ``timeout`` seconds or on an interrupt, and any member still
    running after the leader's exit killed too. Raises RuntimeError (one line) when a run fails, times
    out or cannot start.
    """
    from inkling_probe import procs

    if "{dump}" not in command:
        raise ValueError("the command must contain {dump} where the dump directory goes")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for side, value in (("eager", "1"), ("graph", "0")):
        dump = str(out / side)
        argv = shlex.split(command.replace("{dump}", shlex.quote(dump)))
        log = out / f"{side}-output.txt"
        code, why, _ = procs.run(argv, shell=False, env={**os.environ, env_var: value}, out=log, timeout=timeout)
        if why is not None or code != 0:
            why = why or (f"killed by signal {-code}" if code < 0 else f"exit {code}")
            raise RuntimeError(f"{side} run failed ({why}): {_last_line(log)} (output: {log})")
        paths.append(dump)
    return paths[0], paths[1]


def _last_line(log: Path) -> str:
    """The last non-empty line a run printed (stdout and stderr together), or "no output"."""
    lines = log.read_bytes()[-4000:].decode("utf-8", "replace").strip().splitlines()
    return lines[-1].strip() if lines else "no output"

"""The result of a comparison: rows in execution order, the first divergence, the culprit, findings."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from inkling_probe.compare.metrics import Metrics
from inkling_probe.views.notebook import ReportViews


@dataclass
class Row:
    """One aligned tensor: its errors, its allowance, and where it sits in the attribution."""

    key: str
    step: int
    call: int = 0
    ref_key: str = ""
    cand_key: str = ""
    shape: tuple = ()
    ref_dtype: str = ""
    cand_dtype: str = ""
    against: str = "reference"  # "control" for keys only the control and candidate hold
    status: str = "ok"  # exact | ok | diverged | shape | unreadable | skipped | not_comparable
    metrics: Metrics | None = None
    error: float | None = None  # the chosen metric's error (changed-row fraction for integer keys)
    floor: float | None = None  # the control's error on this key
    threshold: float = 0.0
    score: float = 0.0  # error / threshold: > 1 diverged
    score_in: float = 0.0  # max score of the keys feeding this one
    jump: float = 0.0  # score / max(score_in, 1): > 1 means error is born here
    layer: int | None = None
    depth: int = 0
    note: str = ""
    row_score: float = 0.0  # the largest per-token-row score (0: no token rows)
    bad_rows: list = field(default_factory=list)  # token rows over their own allowance
    token_errors: list | None = None  # e_i per token row (measure.row_errors), for plots
    decision: bool = False  # a declared routing decision
    clear_flips: int = 0  # decisions: tokens whose routing changed with a clear margin
    feeders: list = field(default_factory=list)  # keys taken as this row's inputs
    born: str = ""  # "" | "clean_inputs" | "independent": why attribution blames this row
    findings: list = field(default_factory=list)  # explain's findings (dicts) for this row

    @property
    def diverged(self) -> bool:
        return self.status in ("diverged", "shape")

    @property
    def unchecked(self) -> bool:
        """A row compare could not check (unreadable, or not comparable): never 'within tolerance'."""
        return self.status in ("unreadable", "not_comparable")

    def brief(self) -> dict:
        """``{"key", "step", "metrics"}`` for the JSON's first_divergence and culprit."""
        return {"key": self.key, "step": self.step, "call": self.call, "metrics": self.metric_dict(),
                "error": self.error, "threshold": self.threshold, "score": self.score, "jump": self.jump,
                "score_in": self.score_in, "born": self.born, "bad_rows": self.bad_rows,
                "feeders": self.feeders, "explanations": self.findings}

    def metric_dict(self) -> dict | None:
        return self.metrics.to_dict() if self.metrics is not None else None

    def to_dict(self) -> dict:
        return {"key": self.key, "step": self.step, "call": self.call, "ref_key": self.ref_key,
                "cand_key": self.cand_key, "shape": list(self.shape), "ref_dtype": self.ref_dtype,
                "cand_dtype": self.cand_dtype, "against": self.against, "status": self.status,
                "diverged": self.diverged, "error": self.error, "floor": self.floor,
                "threshold": self.threshold, "score": self.score, "score_in": self.score_in,
                "jump": self.jump, "layer": self.layer, "depth": self.depth, "note": self.note,
                "row_score": self.row_score, "bad_rows": self.bad_rows, "decision": self.decision,
                "born": self.born, "token_errors": self.token_errors, "metrics": self.metric_dict()}


@dataclass(repr=False)  # the short repr and the HTML table come from ReportViews
class Report(ReportViews):
    """Everything ``compare`` found; :meth:`to_dict` is the ``--json`` document."""

    ref: str
    cand: str
    control: str | None
    metric: str
    k: float
    rows: list[Row] = field(default_factory=list)
    control_rows: list[Row] = field(default_factory=list)  # candidate vs control, keys the reference lacks
    first_divergence: Row | None = None
    culprits: list[Row] = field(default_factory=list)  # every independent culprit, ranked
    explanations: list[dict] = field(default_factory=list)  # {"key", "step", "against", "findings": [...]}
    only_ref: list = field(default_factory=list)
    only_cand: list = field(default_factory=list)
    rank_findings: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def culprit(self) -> Row | None:
        """The top-ranked culprit (None when nothing diverged)."""
        return self.culprits[0] if self.culprits else None

    @property
    def diverged(self) -> bool:
        """True when any key (or a rank of a replicated key) diverged: the CLI exits 1."""
        return (any(r.diverged for r in self.rows) or any(r.diverged for r in self.control_rows)
                or any(f.get("diverged") for f in self.rank_findings))

    @property
    def unchecked(self) -> list[Row]:
        """Rows that could not be checked (unreadable, not comparable): the CLI exits 1 when any
        exists and nothing diverged is not claimed (docs/COMPARE.md, exit codes)."""
        return [r for r in self.rows + self.control_rows if r.unchecked]

    def row(self, key: str, step: int = 0, call: int = 0) -> Row:
        for r in self.rows + self.control_rows:
            if (r.key, r.step, r.call) == (key, step, call):
                return r
        raise KeyError(f"no row for {key!r} step {step}")

    def findings(self, key: str, step: int = 0) -> list:
        """What explain found for ``key`` at ``step``, as :class:`Finding` objects (the same type
        ``explain()`` returns; ``f.name``/``f.summary``/``f.evidence``, or ``f["hypothesis"]`` as in
        the JSON)."""
        from inkling_probe.compare.explain import Finding

        return [Finding.from_dict(f) for e in self.explanations if e["key"] == key and e["step"] == step
                for f in e["findings"]]

    def to_dict(self) -> dict:
        return {
            "ref": self.ref, "cand": self.cand, "control": self.control, "metric": self.metric, "k": self.k,
            "diverged": self.diverged,
            "first_divergence": self.first_divergence.brief() if self.first_divergence else None,
            "culprit": self.culprit.brief() if self.culprit else None,
            "culprits": [r.brief() for r in self.culprits],
            "unchecked": [{"key": r.key, "step": r.step, "call": r.call, "status": r.status, "note": r.note}
                          for r in self.unchecked],
            "rows": [r.to_dict() for r in self.rows],
            "control_rows": [r.to_dict() for r in self.control_rows],
            "explanations": self.explanations,
            "only_in_ref": [{"key": k, "step": s} for k, s in self.only_ref],
            "only_in_cand": [{"key": k, "step": s} for k, s in self.only_cand],
            "rank_findings": self.rank_findings,
            "notes": self.notes,
        }


def score_of(error: float | None, threshold: float) -> float:
    """error / threshold with 0/0 = 0 and x/0 = inf."""
    if error is None:
        return 0.0
    if threshold <= 0:
        return 0.0 if error <= 0 else math.inf
    return error / threshold


def join_notes(a: str, b: str) -> str:
    """Two notes as one ("a; b"), empty ones left out."""
    return "; ".join(x for x in (a, b) if x)

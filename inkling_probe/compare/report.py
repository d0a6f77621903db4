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
    status: str = "ok"  # exact | ok | diverged | shape | unreadable | skipped | not_comparable | unchecked
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
    rows_recorded: int | None = None  # coverage (compare/coverage.py): the reference's token rows
    rows_judged: int | None = None  # ... of which judged
    not_judged: dict = field(default_factory=dict)  # reason -> rows not judged
    rows_loose: int = 0  # judged rows whose allowance a changed decision's reach made loose (judge.LOOSE)
    reach: float = 0.0  # the largest allowance a changed decision added to a row here (reach.py)
    carry_score: float | None = None  # the score without that reach (keeps an upstream error's taint)
    cache_feeders: list = field(default_factory=list)  # (key, step, call) of earlier steps it reads (decode)
    decodes: tuple | None = None  # logits: (next step, its token rows, rows fed another token) (decoded.py)

    @property
    def diverged(self) -> bool:
        return self.status in ("diverged", "shape")

    @property
    def unchecked(self) -> bool:
        """A row compare could not check (unreadable, not comparable, or too few rows judged:
        ``unchecked``): never 'within tolerance'."""
        return self.status in ("unreadable", "not_comparable", "unchecked")

    def coverage(self) -> dict:
        """``{"rows_recorded", "rows_judged", "rows_loose", "not_judged": {reason: rows}}``."""
        return {"rows_recorded": self.rows_recorded, "rows_judged": self.rows_judged,
                "rows_loose": self.rows_loose, "not_judged": dict(self.not_judged)}

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
                "born": self.born, "token_errors": self.token_errors, "metrics": self.metric_dict(),
                "coverage": self.coverage(), "reach": self.reach}


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
        """Rows that could not be checked (unreadable, not comparable, too few rows judged) and are
        not downstream of the top culprit (or, with none, of the first divergence: error carried in
        from rows a modality view leaves out, compare/boundary.py): the CLI exits 1 when any exists
        (docs/COMPARE.md, exit codes); :attr:`unchecked_reason` says why in one line."""
        after = _after(self.rows, self.culprit or self.first_divergence)
        return [r for r in self.rows + self.control_rows if r.unchecked and id(r) not in after]

    @property
    def unchecked_reason(self) -> str:
        """One line naming the unchecked keys and why ('' when none)."""
        rows = self.unchecked
        if not rows:
            return ""
        keys = sorted({f"{r.key}@{r.step}" for r in rows})
        why = sorted({r.status.replace("_", " ") for r in rows})
        return (f"{len(rows)} key row(s) unchecked ({', '.join(why)}): {', '.join(keys[:6])}"
                + (f" ... {len(keys) - 6} more" if len(keys) > 6 else ""))

    def coverage(self) -> dict:
        """What was judged over every row (compare/coverage.py)."""
        from inkling_probe.compare.coverage import summary

        return summary(self.rows + self.control_rows)

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
            "unchecked_reason": self.unchecked_reason,
            "coverage": self.coverage(),
            "rows": [r.to_dict() for r in self.rows],
            "control_rows": [r.to_dict() for r in self.control_rows],
            "explanations": self.explanations,
            "only_in_ref": [{"key": k, "step": s} for k, s in self.only_ref],
            "only_in_cand": [{"key": k, "step": s} for k, s in self.only_cand],
            "rank_findings": self.rank_findings,
            "notes": self.notes,
        }


def _after(rows: list[Row], culprit: Row | None) -> set:
    """ids of the rows after ``culprit`` in execution order (its downstream)."""
    if culprit is None:
        return set()
    ids = [id(r) for r in rows]
    return set(ids[ids.index(id(culprit)) + 1:]) if id(culprit) in ids else set()


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

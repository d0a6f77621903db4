"""Run compare on one case in one regime and judge its answer against the case's truth."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class Result:
    """compare's answer for one case and regime, and whether it is right."""

    case: str
    family: str
    kind: str
    regime: str
    truth: tuple
    note: str = ""  # the bug or benign difference the case models
    step: int | None = None  # the step the culprit must name, when the case says
    culprit: str | None = None
    culprit_step: int | None = None
    culprits: list = field(default_factory=list)
    first: str | None = None
    first_step: int | None = None
    diverged: bool = False
    unchecked: str = ""  # compare's one-line reason when keys were left unchecked (exit 1 even without divergence)
    findings: list = field(default_factory=list)  # hypotheses reported for the culprit
    explain_ok: bool | None = None  # None: no culprit right, or nothing expected
    ok: bool = False  # fault: top-1 culprit in truth (at its step); benign: nothing flagged
    truth_score: float | None = None  # max score over the truth keys' rows (> 1: diverged)
    truth_ratio: float | None = None  # candidate error / control error at the truth key (with a control)
    truth_is_first: bool | None = None
    truth_is_max_error: bool | None = None
    truth_is_max_jump: bool | None = None
    worst: str | None = None  # benign: the highest-scoring key and its score
    fault_size: float | None = None  # the fault alone: rel_rms at its truth key, the faulted run vs its clean twin
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _culprits(rep) -> list:
    return getattr(rep, "culprits", None) or ([rep.culprit] if rep.culprit else [])


def _finite(x) -> float:
    return x if x is not None and math.isfinite(x) else (math.inf if x else 0.0)


def _structure(res: Result, rep, truth, step) -> None:
    """Where the truth sits among compare's rows: first divergence? largest error? largest jump?"""
    rows = [r for r in rep.rows if r.error is not None]
    trows = [r for r in rep.rows if r.key in truth and (step is None or r.step == step)]
    if not trows or not rows:
        return
    res.truth_score = max(r.score for r in trows)
    top_err = max(rows, key=lambda r: _finite(r.error))
    top_jump = max(rows, key=lambda r: _finite(r.jump))
    res.truth_is_first = rep.first_divergence is not None and rep.first_divergence.key in truth
    res.truth_is_max_error = top_err.key in truth
    res.truth_is_max_jump = top_jump.key in truth and top_jump.jump > 1
    floors = [r.floor for r in trows if r.floor]
    if floors:
        res.truth_ratio = max(_finite(r.error) for r in trows) / max(floors)


def judge(case, regime: str, rep) -> Result:
    res = Result(case.name, case.family, case.kind, regime, case.truth, case.note, case.step)
    culprits = _culprits(rep)
    res.culprits = [c.key for c in culprits]
    res.culprit = res.culprits[0] if culprits else None
    res.first = rep.first_divergence.key if rep.first_divergence else None
    res.first_step = rep.first_divergence.step if rep.first_divergence else None
    res.diverged = bool(rep.diverged)
    res.unchecked = getattr(rep, "unchecked_reason", "") or ""
    if case.kind == "benign":
        res.ok = not res.diverged and not culprits
        if rep.rows:
            w = max(rep.rows, key=lambda r: _finite(r.score))
            res.worst = f"{w.key} {w.score:.2f}"
        return res
    res.ok = res.culprit in case.truth and (case.step is None or culprits[0].step == case.step)
    res.culprit_step = culprits[0].step if culprits else None
    _structure(res, rep, case.truth, case.step)
    if culprits:
        top = culprits[0]
        res.findings = [f["hypothesis"] for f in rep.findings(top.key, top.step)]
    if res.ok and case.explain:
        res.explain_ok = any(s in h.lower() for h in res.findings for s in case.explain)
    return res


def run_case(case, regime: str, dumps) -> Result:
    """Compare the case's dumps in ``regime`` (recorded already) and judge the answer."""
    from inkling_probe.compare import compare

    trio = case.regimes[regime]
    missing = [dumps.failed[r] for r in (trio.ref, trio.cand, trio.control) if r in dumps.failed]
    if missing:
        return Result(case.name, case.family, case.kind, regime, case.truth, case.note,
                      error=f"record: {missing[0]}")
    ctl = dumps.path(trio.control) if trio.control else None
    try:  # a whole batch recorded: the user names the row holding the reference's prompt
        rep = compare(dumps.path(trio.ref), dumps.path(trio.cand), control=ctl,
                      ref_row=_batch_row(trio.ref), cand_row=_batch_row(trio.cand))
    except Exception as e:
        return Result(case.name, case.family, case.kind, regime, case.truth, case.note,
                      error=f"{type(e).__name__}: {e}")
    res = judge(case, regime, rep)
    if case.kind != "benign":
        res.fault_size = _fault_size(case, rep, dumps.path(trio.cand), ctl)
    return res


def _fault_size(case, rep, cand: str, ctl: str | None) -> float | None:
    """The planted fault's size: rel_rms at its truth keys (the largest, at the case's step) of the
    faulted run against a clean run of its own dtype: the control where there is one (the control's
    benign difference is in the number too: an upper bound), else the reference (the fp32 regime:
    reference and candidate differ by the fault alone)."""
    from inkling_probe.compare import compare

    if ctl is not None:
        try:
            rep = compare(ctl, cand, include=list(case.truth), explain=False)
        except Exception:
            return None
    errs = [r.error for r in rep.rows if r.key in case.truth and (case.step is None or r.step == case.step)
            and r.error is not None and math.isfinite(r.error)]
    return max(errs) if errs else None


def _batch_row(run) -> int | None:
    """The row to compare of a run that recorded a whole batch (None: one prompt recorded)."""
    v = dict(run.variant)
    return v.get("row") if v.get("batch") and not v.get("slice") else None

"""Run explain on the rows that matter: the culprit, the first divergence, and the culprit's own
diverged sub-keys (``<culprit>.input_scale`` and the like, also those compared against the control).
Each is reloaded (one pair at a time), with its noise level = the row's threshold.
"""
from __future__ import annotations

import torch

from inkling_probe.compare.conform import ShapeMismatch, conform
from inkling_probe.compare.explain import Context, explain
from inkling_probe.compare.measure import load
from inkling_probe.compare.report import Report, Row
from inkling_probe.errors import ProbeError


def targets(report: Report, limit: int) -> list[Row]:
    """Rows to explain, most important first, without repeats."""
    out: list[Row] = []
    for r in (report.culprit, report.first_divergence):
        if r is not None and r not in out:
            out.append(r)
    if report.culprit is not None:
        prefix = report.culprit.key + "."
        out += [r for r in report.rows + report.control_rows
                if r.diverged and r.key.startswith(prefix) and r not in out]
    return out[:limit]


def explain_report(report: Report, dumps: dict, ents: dict, run, limit: int) -> None:
    tp = tuple(sorted({d.world_size for d in dumps.values() if d is not None}))
    for row in targets(report, limit):
        findings = explain_row(row, dumps, ents, run, tp)
        report.explanations.append({"key": row.key, "step": row.step, "call": row.call,
                                    "against": row.against, "findings": [f.to_dict() for f in findings]})


def explain_row(row: Row, dumps: dict, ents: dict, run, tp_sizes) -> list:
    ident = (row.key, row.step, row.call)
    base_label = "reference" if row.against == "reference" else "control"
    try:
        ref_e, cand_e = ents[base_label][ident], ents["candidate"][ident]
        r, c = load(dumps[base_label], ref_e), load(dumps["candidate"], cand_e)
        conf = conform(r, c, ref_e.first, cand_e.first)
    except (ProbeError, ShapeMismatch, KeyError):
        return []
    r, c = conf.ref, conf.cand
    masked = run.masks.get(ident)
    if masked and conf.token_dim is not None:
        idx = torch.tensor(masked)
        c = c.clone()
        c.index_copy_(conf.token_dim, idx, r.index_select(conf.token_dim, idx).to(c.dtype))
    ctx = Context(noise=row.threshold, token_dim=conf.token_dim, tp_sizes=tp_sizes,
                  head_dim=ref_e.first.get("meta", {}).get("head_dim"),
                  routing=_routing(row, dumps, run), ref_dtype=r.dtype, cand_dtype=c.dtype)
    return explain(r, c, ctx)


def _routing(row: Row, dumps: dict, run):
    e = run.walk.decisions.get((row.step, row.layer))
    if e is None or row.against != "reference":
        return None
    try:
        return load(dumps["reference"], e)
    except ProbeError:
        return None

"""Diagnose the rows that matter: every culprit, the first divergence, the culprit's own diverged
sub-keys (``<culprit>.input_scale`` and the like, also against the control) and any key asked for.

Each row is reloaded (one pair at a time) and explained with its allowance as the noise level;
rows carry what this needs (feeders, masks, batch rows), nothing reads the walker's state. Two
hypotheses need more than one pair and live here:

- ``inputs_exact``: the row's recorded inputs agree with the reference, its output does not: the
  module's own weights or kernel;
- ``cross_key``: the candidate's tensor equals the reference's at another key of the same step
  (swapped gate/up, q/k, two outputs wired to each other's consumers).
"""
from __future__ import annotations

import math

import numpy as np

from inkling_probe.compare.conform import ShapeMismatch, conform
from inkling_probe.compare.explain import Context, explain
from inkling_probe.compare.measure import load
from inkling_probe.compare.metrics import compare_tensors
from inkling_probe.compare.report import Report, Row
from inkling_probe.compare.values import as_float64
from inkling_probe.errors import ProbeError

CROSS_KEY_LIMIT = 24  # other keys tried for cross-key equality, nearest first


def targets(report: Report, limit: int, keys=()) -> list[Row]:
    """Rows to explain, most important first, without repeats."""
    out: list[Row] = []
    for r in [*report.culprits, report.first_divergence]:
        if r is not None and r not in out:
            out.append(r)
    for c in report.culprits[:1]:
        prefix = c.key + "."
        out += [r for r in report.rows + report.control_rows
                if r.diverged and r.key.startswith(prefix) and r not in out]
    out = out[:limit]
    asked = [r for r in report.rows + report.control_rows if r.key in set(keys) and r not in out]
    return out + asked


def diagnose_report(report: Report, dumps: dict, ents: dict, walker, limit: int, keys=()) -> None:
    tp = tuple(sorted({d.world_size for d in dumps.values() if d is not None}))
    missing = set(keys) - {r.key for r in report.rows + report.control_rows}
    for k in sorted(missing):
        report.notes.append(f"--explain {k}: no such compared key")
    for row in targets(report, limit, keys):
        pair = _pair(row, dumps, ents, walker)  # loaded once for every hypothesis of the row
        findings = [f.to_dict() for f in explain_row(row, dumps, ents, walker, tp, pair)]
        findings += _inputs_exact(row, report)
        if row.diverged and row.against == "reference":
            findings += _cross_key(row, dumps, ents, pair)
        del pair
        row.findings = findings
        report.explanations.append({"key": row.key, "step": row.step, "call": row.call,
                                    "against": row.against, "findings": findings})


def _pair(row: Row, dumps: dict, ents: dict, walker) -> tuple | None:
    ident = (row.key, row.step, row.call)
    base = "reference" if row.against == "reference" else "control"
    try:
        ref_e, cand_e = ents[base][ident], ents["candidate"][ident]
        rows = walker.batch_rows if base == "reference" else (None, walker.batch_rows[1])
        conf = conform(load(dumps[base], ref_e), load(dumps["candidate"], cand_e), ref_e.first, cand_e.first, *rows)
    except (ProbeError, ShapeMismatch, KeyError):
        return None
    # values in their stored type (explain computes float64 block by block): no full float64 copies
    r = as_float64(conf.ref) if conf.ref.packed else np.asarray(conf.ref.array)
    c = as_float64(conf.cand) if conf.cand.packed else np.asarray(conf.cand.array)
    masked = walker.masks.get(ident) if base == "reference" else None
    if masked and conf.token_dim is not None:
        c = np.array(c, dtype=np.result_type(c, r))
        idx = [slice(None)] * c.ndim
        idx[conf.token_dim] = masked
        c[tuple(idx)] = r[tuple(idx)]
    return r, c, conf, ref_e


def explain_row(row: Row, dumps: dict, ents: dict, walker, tp_sizes, pair=None) -> list:
    got = pair if pair is not None else _pair(row, dumps, ents, walker)
    if got is None:
        return []
    r, c, conf, ref_e = got
    ctx = Context(noise=row.threshold or None, token_dim=conf.token_dim, tp_sizes=tp_sizes,
                  head_dim=(ref_e.first.get("meta") or {}).get("head_dim"),
                  routing=_routing(row, dumps, ents, walker, r.shape[conf.token_dim] if conf.token_dim is not None else None),
                  ref_dtype=conf.ref.dtype, cand_dtype=conf.cand.dtype,
                  inputs=_inputs(row, dumps, ents, r.shape[conf.token_dim] if conf.token_dim is not None else
                                 (r.shape[0] if r.ndim >= 2 else None)))
    return call_explain(r, c, ctx)


def _inputs(row: Row, dumps: dict, ents: dict, n_rows: int | None) -> dict | None:
    """The base dump's recorded inputs of the row's key and step (``KEY.in.<name>``), name -> values:
    only those the input hypotheses can read (``n_rows`` rows along dim 0, after leading 1s; at most
    ``explain.recorded.MAX_INPUT`` elements), so nothing else is loaded."""
    from inkling_probe.compare.explain.recorded import MAX_INPUT

    if n_rows is None:
        return None
    base = "reference" if row.against == "reference" else "control"
    prefix, out = row.key + ".in.", {}
    for (key, step, call), e in ents[base].items():
        if step == row.step and call == row.call and key.startswith(prefix) and "." not in key[len(prefix):]:
            shape = list(e.global_shape())
            while len(shape) > 1 and shape[0] == 1 and n_rows != 1:
                shape.pop(0)
            if not shape or shape[0] != n_rows or math.prod(shape) > MAX_INPUT:
                continue
            try:
                v = load(dumps[base], e)
            except ProbeError:
                continue
            out[key[len(prefix):]] = as_float64(v) if v.packed else np.asarray(v.array)
    return out or None


def call_explain(r: np.ndarray, c: np.ndarray, ctx: Context) -> list:
    """explain() on value arrays (the context names the original dtypes)."""
    return explain(r, c, ctx)


def _routing(row: Row, dumps, ents, walker, n_tokens) -> np.ndarray | None:
    """The reference's expert ids per token of the row's layer and step, when a decision was recorded."""
    if row.against != "reference" or n_tokens is None:
        return None
    for (key, step, call), e in ents["reference"].items():
        if step == row.step and call == row.call and walker.is_decision(key, e) and _same_layer(key, row):
            try:
                ids = as_float64(load(dumps["reference"], e)).astype(np.int64)
            except ProbeError:
                return None
            ids = ids.reshape(-1, ids.shape[-1]) if ids.ndim > 1 else ids.reshape(-1, 1)
            return ids if ids.shape[0] == n_tokens else None
    return None


def _same_layer(key: str, row: Row) -> bool:
    from inkling_probe.compare.align import layer_of

    return layer_of(key) == row.layer


def _inputs_exact(row: Row, report: Report) -> list[dict]:
    """Recorded inputs within tolerance, output off: the module itself."""
    if not row.diverged or not row.feeders or not all(".in." in f for f in row.feeders):
        return []
    ins = [r for r in report.rows if r.step == row.step and r.key in row.feeders]
    if not ins or any(r.diverged for r in ins):
        return []
    worst = max(r.score for r in ins)
    return [{"hypothesis": "inputs_exact", "kind": "module",
             "summary": f"its recorded inputs agree with the reference (worst score {worst:.3g}); "
                        "the output is off: this module's weights or kernel",
             "evidence": {"inputs": [r.key for r in ins], "worst_input_score": worst}}]


def _cross_key(row: Row, dumps, ents, got) -> list[dict]:
    """The candidate's tensor equals the reference's at another key of the same step."""
    if got is None:
        return []
    _, c, conf, ref_e = got
    shape = ref_e.global_shape()
    others = [(k, e) for (k, s, call), e in ents["reference"].items()
              if s == row.step and k != row.key and e.global_shape() == shape]
    others.sort(key=lambda ke: abs(ke[1].seq - ref_e.seq))
    for k, e in others[:CROSS_KEY_LIMIT]:
        try:
            v = load(dumps["reference"], e)
            other = (as_float64(v) if v.packed else np.asarray(v.array)).reshape(c.shape)
        except (ProbeError, ValueError):
            continue
        m = compare_tensors(other, c)
        if m.rel_rms <= max(row.threshold, 1e-12) and m.nonfinite_mismatch == 0:
            return [{"hypothesis": "cross_key", "kind": "swap",
                     "summary": f"the candidate's {row.key} equals the reference's {k} "
                                f"(rel_rms {m.rel_rms:.3g}): outputs swapped or wired to the wrong consumer",
                     "evidence": {"other_key": k, "rel_rms": m.rel_rms}}]
    return []


__all__ = ["diagnose_report", "explain_row", "targets", "call_explain"]

"""``compare``: align two dumps, measure every pair key by key, attribute, explain.

    from inkling_probe.compare import compare
    report = compare("ref_dump", "cand_dump", control="control_dump", name_map="hf_inkling")
    report.culprit.key, report.findings(report.culprit.key)

Memory: one pair (plus its control tensor) is loaded at a time; metrics accumulate in float64
over chunks, so peak memory follows the largest tensor, not the dump.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from inkling_probe.compare import divergence, floor
from inkling_probe.compare.align import Entry, align, entries, layer_of
from inkling_probe.compare.measure import Measured, is_decision, measure
from inkling_probe.compare.ranks import check_replicated
from inkling_probe.compare.report import Report, Row, score_of
from inkling_probe.errors import DumpError
from inkling_probe.settings import glob_patterns, matches_any
from inkling_probe.store.reader import as_dump

_TWO_BYTES_PLUS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


@dataclass
class _Walk:
    """Running state along execution order: upstream precision, layer depth, routing changes."""

    precision: torch.dtype | None = None
    layers_seen: dict = field(default_factory=dict)  # step -> set of layers
    changed: dict = field(default_factory=dict)  # (step, layer) -> (n_rows, rows)
    decisions: dict = field(default_factory=dict)  # (step, layer) -> reference Entry of the last decision key
    tally: dict = field(default_factory=dict)  # decision key -> [rows changed, rows seen] over the steps so far

    def advance(self, key: str, step: int, dtypes) -> tuple[int | None, int, torch.dtype | None]:
        """(layer, depth, precision) of the next key."""
        layer = layer_of(key)
        seen = self.layers_seen.setdefault(step, set())
        if layer is not None:
            seen.add(layer)
        running = [d for d in dtypes if d in _TWO_BYTES_PLUS]
        self.precision = floor.coarsest(self.precision, *running)
        return layer, len(seen), floor.coarsest(self.precision, *dtypes)

    def set_aside(self, step: int, layer):
        def rows(n: int):
            n_rows, changed = self.changed.get((step, layer), (None, None))
            return changed if n_rows == n else None
        return rows

    def note_decision(self, step: int, layer, m: Measured, ref_entry: Entry) -> None:
        """Remember the rows a decision key changed; its error becomes the changed fraction of all
        its token rows so far (one changed decode token alone would otherwise read 100%)."""
        if m.changed_rows is not None and m.token_rows:
            t = self.tally.setdefault(ref_entry.key, [0, 0])
            t[0] += len(m.changed_rows)
            t[1] += m.token_rows
            m.error = t[0] / t[1]
            if t[0]:
                m.note = "; ".join(x for x in (m.note, f"{t[0]} of {t[1]} token rows changed (steps so far)") if x)
            n_rows, old = self.changed.get((step, layer), (m.token_rows, []))
            if n_rows == m.token_rows:
                self.changed[(step, layer)] = (n_rows, sorted(set(old) | set(m.changed_rows)))
            self.decisions[(step, layer)] = ref_entry


def _dtype(name: str) -> torch.dtype | None:
    d = getattr(torch, name, None)
    return d if isinstance(d, torch.dtype) else None


def _filtered(ents: dict, include, steps) -> dict:
    pats = glob_patterns(include)
    return {k: e for k, e in ents.items()
            if (not pats or matches_any(k[0], pats))
            and (steps is None or k[1] in steps)}


@contextlib.contextmanager
def _threads(n: int | None):
    """torch intra-op threads for the block (restored after)."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def compare(ref, cand, control=None, *, threads: int | None = 1, **options) -> Report:
    """Compare dump ``cand`` against dump ``ref`` (paths or open dumps); see :func:`_compare`.

    ``threads``: torch threads while comparing (None: leave as is). The float64 passes are memory
    bound; one thread avoids OpenMP barrier stalls on a busy machine (5.7x faster measured on a
    loaded 2-core box: scripts/bench_compare.py).
    """
    with _threads(threads):
        return _compare(ref, cand, control, **options)


def _compare(ref, cand, control=None, *, name_map=None, metric: str = "rel_rms", threshold: float | None = None,
             k: float = floor.K_DEFAULT, include=None, steps=None, explain: bool = True, max_explain: int = 8,
             progress=None) -> Report:
    """Compare dump ``cand`` against dump ``ref`` (paths or open dumps); see docs/COMPARE.md.

    ``control`` is a second reference differing only in a benign factor (sets the noise floor per
    key); ``name_map`` (a NameMap, TOML path or shipped name) applies to every dump's keys;
    ``threshold`` replaces the dtype default in ``max(threshold, k * floor)``; ``include`` holds
    key globs (after the map); ``steps`` a set of steps. ``progress(done, total, key)`` is called
    per key.
    """
    from inkling_probe.namemap import NameMap

    if metric == "max_abs" and threshold is None and control is None:
        raise ValueError("metric max_abs has no dtype default: pass a threshold or a control")
    nm = NameMap.load(name_map) if name_map is not None else None
    dumps = {"reference": as_dump(ref), "candidate": as_dump(cand), "control": as_dump(control)}
    ents = {label: _filtered(entries(d, nm, label), include, steps) for label, d in dumps.items() if d is not None}
    al = align(ents["reference"], ents["candidate"])
    if not any(p.cand is not None for p in al.pairs):
        raise DumpError(f"{dumps['candidate'].path}: no key in common with the reference {dumps['reference'].path}"
                        + (" (check the name map)" if nm is None else f" after name map {nm.source}"))
    report = Report(dumps["reference"].path, dumps["candidate"].path,
                    dumps["control"].path if dumps["control"] is not None else None, metric, k,
                    only_ref=al.only_ref, only_cand=al.only_cand)
    run = _Run(dumps, ents, metric, threshold, k, report)
    paired = [p for p in al.pairs if p.cand is not None]
    for i, p in enumerate(paired):
        report.rows.append(run.row(p.key, p.step, p.call, p.ref, p.cand))
        if progress:
            progress(i + 1, len(paired), p.key)
    report.control_rows = run.control_only_rows()
    divergence.attribute(report.rows)
    report.first_divergence = divergence.first_divergence(report.rows)
    report.culprit = divergence.culprit(report.rows)
    if explain:
        from inkling_probe.compare.explaining import explain_report
        explain_report(report, dumps, ents, run, max_explain)
    for d in dumps.values():
        if d is not None and d is not ref and d is not cand and d is not control:
            d.close()
    return report


class _Run:
    """Measures rows in execution order, keeping the running state of the candidate and control."""

    def __init__(self, dumps, ents, metric, threshold, k, report: Report):
        self.dumps, self.ents, self.metric, self.user, self.k, self.report = dumps, ents, metric, threshold, k, report
        self.walk, self.ctl_walk = _Walk(), _Walk()
        self.masks: dict[tuple, list[int]] = {}  # (key, step, call) -> rows set aside in the candidate
        self.token_dims: dict[tuple, int] = {}

    def row(self, key, step, call, ref_e: Entry, cand_e: Entry) -> Row:
        dtypes = [d for d in (_dtype(ref_e.dtype), _dtype(cand_e.dtype)) if d is not None]
        layer, depth, precision = self.walk.advance(key, step, dtypes)
        rtol = floor.base_threshold(precision)
        m = measure(self.dumps["reference"], ref_e, self.dumps["candidate"], cand_e, self.metric, rtol,
                    self.walk.set_aside(step, layer))
        self.walk.note_decision(step, layer, m, ref_e)
        default = self._default(precision, depth)
        fl = self._floor(key, step, call, ref_e, layer, dtypes)
        row = Row(key, step, call, ref_e.key, cand_e.key, ref_e.global_shape(), ref_e.dtype, cand_e.dtype,
                  metrics=m.metrics, error=m.error, floor=fl, layer=layer, depth=depth, note=m.note)
        row.threshold = floor.threshold(fl, default, self.user, self.k)
        self._status(row, m, step, layer, self.walk)
        if m.masked:
            self.masks[(key, step, call)] = m.masked
            row.note = _join(row.note, f"{len(m.masked)} token row(s) set aside (routing changed)")
        for label in ("reference", "candidate", "control"):
            e = ref_e if label == "reference" else cand_e if label == "candidate" else \
                self.ents.get("control", {}).get((key, step, call))
            if e is not None:
                self.report.rank_findings += check_replicated(self.dumps[label], e, label, key, default)
        return row

    def _default(self, precision, depth) -> float:
        if self.metric == "max_abs":
            return 0.0
        return floor.default_threshold(precision, depth, self.metric)

    def _floor(self, key, step, call, ref_e, layer, dtypes) -> float | None:
        ctl = self.ents.get("control", {}).get((key, step, call))
        if ctl is None:
            if "control" in self.ents:
                self.report.notes.append(f"control lacks {key} step {step}: dtype default threshold used")
            return None
        cdt = [d for d in (_dtype(ctl.dtype),) if d is not None]
        self.ctl_walk.advance(key, step, dtypes + cdt)
        m = measure(self.dumps["reference"], ref_e, self.dumps["control"], ctl, self.metric,
                    floor.base_threshold(floor.coarsest(*dtypes, *cdt)), self.ctl_walk.set_aside(step, layer))
        self.ctl_walk.note_decision(step, layer, m, ref_e)
        return m.error if m.status in ("ok", "exact") else None

    def _status(self, row: Row, m: Measured, step, layer, walk: _Walk) -> None:
        if m.status == "shape":
            after_change = bool(walk.changed.get((step, layer), (0, []))[1])
            row.status = "ok" if after_change else "shape"
            row.note = _join(m.note, "after a routing change" if after_change else "")
            row.score = 0.0 if after_change else float("inf")
            row.error = None
            return
        if _unmatched_after_change(walk, m, step, layer):
            row.status, row.score = "skipped", 0.0
            row.note = _join(row.note, "not judged: its rows don't match the tokens of a routing change before it")
            return
        if m.status == "unreadable":
            row.status, row.score = "unreadable", 0.0
            return
        row.score = score_of(row.error, row.threshold)
        row.status = "exact" if m.status == "exact" or (m.metrics is not None and m.metrics.exact) else \
            ("diverged" if row.score > 1.0 else "ok")
        if row.status == "exact" and row.score > 1.0:
            row.status = "diverged"

    def control_only_rows(self) -> list[Row]:
        """Candidate vs control for the keys the reference lacks (e.g. quantization scales)."""
        ctl = self.ents.get("control")
        if not ctl:
            return []
        ref = self.ents["reference"]
        walk, out = _Walk(), []
        for ident, cand_e in sorted(self.ents["candidate"].items(), key=lambda kv: (kv[0][1], kv[1].seq, kv[0][2])):
            if ident in ref or ident not in ctl:
                continue
            key, step, call = ident
            dtypes = [d for d in (_dtype(ctl[ident].dtype), _dtype(cand_e.dtype)) if d is not None]
            layer, depth, precision = walk.advance(key, step, dtypes)
            m = measure(self.dumps["control"], ctl[ident], self.dumps["candidate"], cand_e, self.metric,
                        floor.base_threshold(precision))
            row = Row(key, step, call, ctl[ident].key, cand_e.key, ctl[ident].global_shape(), ctl[ident].dtype,
                      cand_e.dtype, against="control", metrics=m.metrics, error=m.error, layer=layer,
                      depth=depth, note=m.note)
            row.threshold = floor.threshold(None, self._default(precision, depth), self.user, self.k)
            self._status(row, m, step, layer, walk)
            out.append(row)
        return out


def _unmatched_after_change(walk: _Walk, m: Measured, step, layer) -> bool:
    """A float key after a routing change in its layer whose rows aren't the decision's tokens."""
    n_rows, changed = walk.changed.get((step, layer), (None, None))
    if not changed or m.changed_rows is not None or m.status not in ("ok",):
        return False
    return m.token_rows != n_rows


def _join(a: str, b: str) -> str:
    return "; ".join(x for x in (a, b) if x)

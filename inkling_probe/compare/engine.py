"""``compare``: align two dumps, measure every pair key by key, attribute, explain.

    from inkling_probe.compare import compare
    report = compare("ref_dump", "cand_dump", control="control_dump", name_map="hf_inkling")
    report.culprit.key, report.culprits, report.findings(report.culprit.key)

numpy and h5py only: torch is imported only to replay. Memory: one pair (plus its control
array) is loaded at a time; metrics accumulate in float64 over chunks, so peak memory follows the
largest tensor, not the dump.
"""
from __future__ import annotations

from inkling_probe.compare import boundary, cluster as on_cluster, coverage, divergence, floor, parallel, relations
from inkling_probe.compare import steps as decode_steps
from inkling_probe.compare.align import align, entries
from inkling_probe.compare.report import Report
from inkling_probe.compare.walker import Walker
from inkling_probe.errors import DumpError
from inkling_probe.removed import gone
from inkling_probe.settings import glob_patterns, matches_any
from inkling_probe.store.reader import as_dump


def compare(ref, cand, control=None, **options) -> Report:
    """Compare dump ``cand`` against dump ``ref`` (paths or open dumps); see :func:`_compare`.

    ``jobs`` (default: the cores) worker processes read and measure pairs ahead of the walk; the
    report is the same for any ``jobs``. (``threads=``, without effect since ``jobs``, was removed
    in 0.2.0: passing it names ``jobs``.)
    """
    if "threads" in options:
        raise TypeError(str(gone("compare(threads=...)", "compare(jobs=N)")))
    return _compare(ref, cand, control, **options)


def _filtered(ents: dict, include, steps) -> dict:
    pats = glob_patterns(include)
    return {k: e for k, e in ents.items()
            if (not pats or matches_any(k[0], pats))
            and (steps is None or k[1] in steps)}


def _compare(ref, cand, control=None, *, name_map=None, metric: str = "rel_rms", threshold: float | None = None,
             k: float = floor.K_DEFAULT, include=None, steps=None, explain: bool = True, max_explain: int = 8,
             explain_keys=(), decisions=(), ref_row: int | None = None, cand_row: int | None = None,
             progress=None, jobs: int | None = None, cluster=None) -> Report:
    """Compare dump ``cand`` against dump ``ref`` (paths or open dumps); see docs/COMPARE.md.

    ``control`` is a second reference differing only in a benign factor (sets the noise floor per
    key); ``name_map`` (a NameMap, TOML path or shipped name) applies to every dump's keys;
    ``threshold`` replaces the dtype default; ``include`` holds key globs (after the map);
    ``steps`` a set of steps; ``explain_keys`` keys to explain besides the culprits;
    ``decisions`` globs of keys that are routing decisions (besides declared ones);
    ``ref_row``/``cand_row`` the batch row to compare when that side ran a batch.
    ``progress(done, total, key)`` is called per key. ``cluster`` (a Dask scheduler address or a
    distributed.Client) measures on that cluster's workers instead of ``jobs`` processes (compare/cluster.py).
    """
    import math

    from inkling_probe.store.namemap import NameMap

    if metric == "max_abs" and threshold is None and control is None:
        raise ValueError("metric max_abs has no dtype default: pass a threshold or a control")
    if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold {threshold!r}: must be a finite number >= 0")
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
    decision_globs = list(decisions) + (list(getattr(nm, "decisions", None) or []) if nm else [])
    walker = Walker(dumps, ents, report, metric=metric, user=threshold, k=k, decision_globs=decision_globs,
                    batch_rows=(ref_row, cand_row), mixing_globs=list(getattr(nm, "mixing", None) or []))
    held = {(k, s) for (k, s, c) in ents["candidate"]}  # a call the candidate lacks may pair by expert
    paired = [p for p in al.pairs if p.cand is not None or (p.key, p.step) in held]
    ahead = [p for p in paired if p.cand is not None]
    shared = [d.path for d in dumps.values() if d is not None]
    with on_cluster.connected(cluster, shared) as pool, \
            parallel.walk_ahead(dumps, ents, ahead, metric, (ref_row, cand_row), jobs, pool=pool):
        for i, p in enumerate(paired):
            row = walker.row(p)
            if row is not None:
                report.rows.append(row)
            if progress:
                progress(i + 1, len(paired), p.key)
        report.notes += parallel.worker_notes()  # a worker's death: what was measured again, and where
    report.control_rows = walker.control_only_rows()
    decode_steps.link_cache(report.rows)
    divergence.attribute(report.rows)
    relations.mark(report, dumps, ents, walker)  # own culprits among rows whose feeders are guessed
    boundary.mark(report, dumps)  # one modality's view: error carried in from the rows it leaves out
    divergence.attribute(report.control_rows)
    report.first_divergence = divergence.first_divergence(report.rows)
    report.culprits = divergence.culprits(report.rows) or divergence.culprits(report.control_rows)
    report.notes += walker.summary_notes() + (pool.final_notes if pool is not None else [])
    cov = coverage.summary(report.rows + report.control_rows)
    all_clear = not report.diverged and not report.unchecked  # its one line says the coverage itself
    if not all_clear or cov["rows_judged"] < cov["rows_recorded"] or cov["rows_loose"]:  # every verdict says it
        report.notes.insert(0, "coverage: " + coverage.line(report.rows + report.control_rows))
    if explain or explain_keys:
        from inkling_probe.compare.diagnose import diagnose_report
        diagnose_report(report, dumps, ents, walker, max_explain if explain else 0, explain_keys)
    for d in dumps.values():
        if d is not None and d is not ref and d is not cand and d is not control:
            d.close()
    return report

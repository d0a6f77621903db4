"""Plain-text views of a compare document: the short ``repr`` and the summary lines."""
from __future__ import annotations

from inkling_probe.views.doc import as_doc, culprits, findings, fmt, hypothesis, name, verdict


def short_repr(report) -> str:
    """``<Report cand vs ref: N keys, D diverged; culprit KEY step S (score x)>``: one line."""
    doc = as_doc(report)
    rows = doc.get("rows") or []
    diverged = sum(1 for r in rows if r.get("diverged"))
    return f"<Report {name(doc.get('cand'))} vs {name(doc.get('ref'))}: {len(rows)} keys, " \
           f"{diverged} diverged; {verdict(doc)}>"


def summary_lines(report, limit: int = 5) -> list[str]:
    """The verdict, the first divergence and each culprit with what explain found."""
    doc = as_doc(report)
    ctl = f" (control {name(doc['control'])})" if doc.get("control") else ""
    lines = [f"{name(doc.get('cand'))} vs {name(doc.get('ref'))}{ctl}: {verdict(doc)}"]
    fd = doc.get("first_divergence")
    if fd:
        lines.append(f"first divergence: {fd['key']} step {fd['step']} ({doc.get('metric', 'rel_rms')} "
                     f"{fmt(fd.get('error'))} > {fmt(fd.get('threshold'))})")
    for rank, c in enumerate(culprits(doc)[:limit], 1):
        lines.append(f"culprit {rank}: {c['key']} step {c['step']} (score {fmt(c.get('score'))}, "
                     f"jump {fmt(c.get('jump'))})")
        lines += [f"  {hypothesis(f)} {label}: {f.get('summary', '')}" for label, f in
                  findings(doc, c["key"], c["step"])]
    return lines

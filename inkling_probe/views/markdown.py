"""report.md: the same content as report.html as Markdown, images linked (files beside it)."""
from __future__ import annotations

from inkling_probe.views.doc import as_doc, compared, culprits, findings, fmt, hypothesis, name, rows, verdict


def markdown(report, images: dict[str, str] = (), files=(), limit: int = 40) -> str:
    """``images``: caption -> file name beside report.md."""
    doc = as_doc(report)
    ctl = f", control `{name(doc['control'])}`" if doc.get("control") else ""
    out = ["# inkling-probe report", "", f"**{verdict(doc)}**", "",
           f"Candidate `{name(doc.get('cand'))}` against reference `{name(doc.get('ref'))}`{ctl}; "
           f"metric {doc.get('metric', 'rel_rms')}, {compared(doc)}.", "", "## Culprits", ""]
    for rank, c in enumerate(culprits(doc), 1):
        out.append(f"{rank}. `{c['key']}` step {c.get('step', 0)}: {fmt(c.get('error'))} > threshold "
                   f"{fmt(c.get('threshold'))} (score {fmt(c.get('score'))}, jump {fmt(c.get('jump'))})")
        out += [f"   - {hypothesis(f)} `{label}`: {f.get('summary', '')}"
                for label, f in findings(doc, c["key"], c.get("step"))]
    if not culprits(doc):
        out.append("none")
    fd = doc.get("first_divergence")
    if fd:
        out += ["", f"First divergence: `{fd['key']}` step {fd.get('step', 0)} ({fmt(fd.get('error'))} > "
                f"{fmt(fd.get('threshold'))})."]
    for caption, file in dict(images).items():
        out += ["", f"![{caption}]({file})"]
    out += ["", "## Diverged keys", "", "| key | step | rel_rms | floor | threshold | score | jump | status | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    diverged = [r for r in rows(doc) if r.get("diverged")]
    for r in diverged[:limit]:
        m = r.get("metrics") or {}
        note = str(r.get("note", "")).replace("|", "\\|")
        out.append(f"| `{r['key']}` | {r.get('step', 0)} | {fmt(m.get('rel_rms'))} | {fmt(r.get('floor'))} | "
                   f"{fmt(r.get('threshold'))} | {fmt(r.get('score'))} | {fmt(r.get('jump'))} | {r.get('status')} | {note} |")
    if len(diverged) > limit:
        out.append(f"\n... {len(diverged) - limit} more diverged keys (summary.json has them all)")
    if files:
        out += ["", "## Files", ""] + [f"- [{f}]({f})" for f in files]
    return "\n".join(out) + "\n"

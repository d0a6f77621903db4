"""HTML views: the table a notebook shows (``_repr_html_``) and the self-contained report page.

The page has no script and no external resource: styles inline, plots as base64 ``data:`` images,
links only to files beside it (relative), and the full table folded in ``<details>``, which opens
without JavaScript.
"""
from __future__ import annotations

import base64
from html import escape

from inkling_probe.views.doc import as_doc, compared, culprits, findings, fmt, hypothesis, name, rows, verdict

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1180px;
color:#1b1b1b;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table.ip{border-collapse:collapse;font-size:.85em;font-variant-numeric:tabular-nums}
table.ip td,table.ip th{border:1px solid #ddd;padding:2px 6px;text-align:right}
table.ip td.k,table.ip th.k,table.ip td.t{text-align:left}
tr.culprit{background:#fde2e2;font-weight:bold}tr.first{background:#fff4cc}tr.div{color:#a40000}
.verdict{font-size:1.1em;padding:.6em;border-left:5px solid #c62828;background:#fbeaea}
.verdict.ok{border-color:#2e7d32;background:#eaf5ea}
code{background:#f3f3f3;padding:0 3px}img{max-width:100%;border:1px solid #eee}
"""
_COLUMNS = ("key", "step", "shape", "dtype", "rel_rms", "max_abs", "floor", "threshold", "score", "jump",
            "status", "note")


def table(report, limit: int = 25, diverged_only: bool = True) -> str:
    """The rows as an HTML table, culprits first, then the first divergence, then diverged rows in
    execution order (``limit`` rows at most; ``diverged_only=False`` adds the others)."""
    doc = as_doc(report)
    marks = _marks(doc)
    ordered = sorted(rows(doc), key=lambda r: marks.get(_id(r), ("", 99))[1])
    picked = [r for r in ordered if _id(r) in marks or r.get("diverged") or not diverged_only]
    head = "".join(f'<th class="{"k" if c == "key" else ""}">{c}</th>' for c in _COLUMNS)
    body = "".join(_tr(r, marks) for r in picked[:limit])
    more = len(picked) - limit
    tail = f'<tr><td class="t" colspan="{len(_COLUMNS)}">... {more} more rows</td></tr>' if more > 0 else ""
    return f'<table class="ip"><thead><tr>{head}</tr></thead><tbody>{body}{tail}</tbody></table>'


def repr_html(report) -> str:
    """What a notebook shows for a report: the verdict, the culprits with their findings, the table."""
    doc = as_doc(report)
    return (f"<div><p><b>{escape(name(doc.get('cand')))}</b> vs <b>{escape(name(doc.get('ref')))}</b>: "
            f"{escape(verdict(doc))}</p>{_culprit_list(doc)}{table(doc, limit=15)}</div>")


def page(report, images: dict[str, bytes], environment: dict | None = None, files: list[str] = (),
         title: str = "inkling-probe report") -> str:
    """The whole report.html: ``images`` maps a caption to PNG bytes (embedded), ``files`` are
    names beside the page (linked relatively)."""
    doc = as_doc(report)
    ok = not doc.get("diverged")
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>",
             f'<p class="verdict{" ok" if ok else ""}">{escape(verdict(doc))}</p>', _inputs(doc),
             "<h2>Culprits</h2>", _culprit_list(doc) or "<p>none</p>", _first(doc), "<h2>Plots</h2>"]
    for caption, data in images.items():
        parts.append(f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,'
                     f'{base64.b64encode(data).decode()}"><figcaption>{escape(caption)}</figcaption></figure>')
    parts += ["<h2>Diverged keys</h2>", table(doc, limit=60),
              f"<details><summary>all {compared(doc)}</summary>{table(doc, 10**6, False)}</details>",
              _notes(doc), _environment(environment), _files(files), "</body></html>"]
    return "\n".join(p for p in parts if p)


def _id(r: dict) -> tuple:
    return r["key"], r.get("step", 0), r.get("call", 0), r.get("against", "reference")


def _marks(doc: dict) -> dict:
    """row id -> (label, order): culprits by rank, then the first divergence."""
    out = {}
    for rank, c in enumerate(culprits(doc), 1):
        out[(c["key"], c.get("step", 0), c.get("call", 0), "reference")] = (f"CULPRIT {rank}", rank)
    fd = doc.get("first_divergence")
    if fd:
        fid = (fd["key"], fd.get("step", 0), fd.get("call", 0), "reference")
        label, order = out.get(fid, ("", 50))
        out[fid] = ((label + ",FIRST").lstrip(","), order)
    return out


def _tr(r: dict, marks: dict) -> str:
    m = r.get("metrics") or {}
    label = marks.get(_id(r), ("", 0))[0]
    css = "culprit" if "CULPRIT" in label else "first" if label else "div" if r.get("diverged") else ""
    dt = r.get("ref_dtype", "") if r.get("ref_dtype") == r.get("cand_dtype") else f"{r.get('ref_dtype')}/{r.get('cand_dtype')}"
    key = r["key"] + ("" if r.get("against", "reference") == "reference" else " (vs control)")
    cells = [key, r.get("step", 0), "x".join(map(str, r.get("shape") or [])), dt, fmt(m.get("rel_rms")),
             fmt(m.get("max_abs")), fmt(r.get("floor")), fmt(r.get("threshold")), fmt(r.get("score")),
             fmt(r.get("jump")), label or r.get("status", ""), r.get("note", "")]
    tds = "".join(f'<td class="{"k" if i == 0 else "t" if i >= 10 else ""}">{escape(str(c))}</td>'
                  for i, c in enumerate(cells))
    return f'<tr class="{css}">{tds}</tr>'


def _culprit_list(doc: dict) -> str:
    items = []
    for rank, c in enumerate(culprits(doc), 1):
        found = "".join(f"<li><b>{escape(hypothesis(f))}</b> <code>{escape(label)}</code>: "
                        f"{escape(f.get('summary', ''))}</li>" for label, f in findings(doc, c["key"], c.get("step")))
        items.append(f"<li><b>culprit {rank}: <code>{escape(c['key'])}</code></b> step {c.get('step', 0)}: "
                     f"{escape(doc.get('metric', 'rel_rms'))} {fmt(c.get('error'))} &gt; threshold "
                     f"{fmt(c.get('threshold'))} (score {fmt(c.get('score'))}, jump {fmt(c.get('jump'))})"
                     f"{'<ul>' + found + '</ul>' if found else ''}</li>")
    return f"<ol>{''.join(items)}</ol>" if items else ""


def _first(doc: dict) -> str:
    fd = doc.get("first_divergence")
    if not fd:
        return ""
    return (f"<p>First divergence in execution order: <code>{escape(fd['key'])}</code> step {fd.get('step', 0)} "
            f"({fmt(fd.get('error'))} &gt; {fmt(fd.get('threshold'))}).</p>")


def _inputs(doc: dict) -> str:
    ctl = f", control <code>{escape(name(doc['control']))}</code>" if doc.get("control") else ""
    return (f"<p>Candidate <code>{escape(name(doc.get('cand')))}</code> against reference "
            f"<code>{escape(name(doc.get('ref')))}</code>{ctl}; metric {escape(doc.get('metric', 'rel_rms'))}, "
            f"{compared(doc)}.</p>")



def _notes(doc: dict) -> str:
    notes = doc.get("notes") or []
    return f"<h2>Notes</h2><ul>{''.join(f'<li>{escape(n)}</li>' for n in notes)}</ul>" if notes else ""


def _environment(env: dict | None) -> str:
    if not env:
        return ""
    flat = [(k, v) for k, v in env.items() if not isinstance(v, dict)]
    for group in ("packages", "gpu", "variables", "recorded"):
        flat += [(f"{group}.{k}", v) for k, v in (env.get(group) or {}).items()]
    rows_ = "".join(f'<tr><td class="k">{escape(k)}</td><td class="t">{escape(str(v))}</td></tr>' for k, v in flat)
    return f'<h2>Environment</h2><details><summary>{len(flat)} entries</summary><table class="ip">{rows_}</table></details>'


def _files(files) -> str:
    if not files:
        return ""
    links = "".join(f'<li><a href="{escape(f)}">{escape(f)}</a></li>' for f in files)
    return f"<h2>Files</h2><ul>{links}</ul>"

"""The compare document every view reads: ``Report.to_dict()``, the same as ``compare --json``.

Views take either a report object (anything with ``to_dict()``) or the document itself, so a
report written from a saved ``--json`` and one from a live comparison look the same.
"""
from __future__ import annotations

import json
import os

from inkling_probe.views.format import fmt as _fmt


def as_doc(report) -> dict:
    """The JSON document of ``report`` (a Report, a dict, or the path of a saved ``--json``)."""
    if isinstance(report, dict):
        return report
    if isinstance(report, (str, os.PathLike)):
        from inkling_probe.store.inputs import BadInputFile, read_text

        text = read_text(report, "a saved compare --json document")  # regular files only, bounded
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise BadInputFile(f"{os.fspath(report)}: not a compare --json document ({e})") from None
        if not isinstance(doc, dict):
            raise BadInputFile(f"{os.fspath(report)}: not a compare --json document (a JSON {type(doc).__name__})")
        return doc
    if hasattr(report, "to_dict"):
        return report.to_dict()
    raise TypeError(f"expected a compare report or its JSON document, got {type(report).__name__}")


def culprits(doc: dict) -> list[dict]:
    """The ranked culprits (``culprits`` when the document has them, else the single ``culprit``)."""
    ranked = doc.get("culprits")
    if ranked is not None:
        return list(ranked)
    return [doc["culprit"]] if doc.get("culprit") else []


def findings(doc: dict, key: str, step: int | None = None) -> list[tuple[str, dict]]:
    """``(label, finding)`` pairs explain gave for ``key`` and its sub-keys (``key.input_scale``):
    from the document's ``explanations`` and from a ranked culprit's own ``explanations``."""
    groups = list(doc.get("explanations") or [])
    for c in culprits(doc):
        if c.get("key") == key:
            groups += [e if "findings" in e else {"key": key, "findings": [e]} for e in c.get("explanations") or []]
    out: list[tuple[str, dict]] = []
    for e in groups:
        mine = e.get("key", key) == key or e.get("key", "").startswith(key + ".")
        if not mine or (step is not None and e.get("step", step) != step):
            continue
        label = e.get("key", key) + ("" if e.get("against", "reference") == "reference" else " (vs control)")
        out += [(label, f) for f in e.get("findings") or [] if (label, f) not in out]
    return out


def hypothesis(finding: dict) -> str:
    return finding.get("hypothesis") or finding.get("kind") or finding.get("name") or "finding"


def rows(doc: dict, step: int | None = None) -> list[dict]:
    """Rows in execution order (candidate vs reference, then vs control), optionally of one step."""
    out = list(doc.get("rows") or []) + list(doc.get("control_rows") or [])
    return [r for r in out if step is None or r.get("step") == step]


def compared(doc: dict) -> str:
    """How many keys were compared, said the same way wherever a view counts them: the keys against
    the reference, then the rows against the control (which the full table lists too)."""
    n, m = len(doc.get("rows") or []), len(doc.get("control_rows") or [])
    return f"{n} keys compared against the reference" + (f", {m} against the control" if m else "")


def row_for(doc: dict, key: str, step: int = 0, call: int = 0) -> dict | None:
    for r in rows(doc):
        if (r["key"], r.get("step", 0), r.get("call", 0)) == (key, step, call):
            return r
    return None


def verdict(doc: dict) -> str:
    """One line: what was compared and what was found."""
    ranked = culprits(doc)
    if ranked:
        c = ranked[0]
        more = f" (+{len(ranked) - 1} more)" if len(ranked) > 1 else ""
        return f"culprit {c['key']} step {c['step']}: {doc.get('metric', 'rel_rms')} {fmt(c.get('error'))} " \
               f"> threshold {fmt(c.get('threshold'))}, jump {fmt(c.get('jump'))}{more}"
    if doc.get("diverged"):
        return "diverged, no single culprit"
    return f"within tolerance ({len(doc.get('rows') or [])} keys)"


def fmt(x, digits: int = 3) -> str:
    """A number for people: 3 significant digits, '-' for None/NaN."""
    return _fmt(x, digits)


def name(path) -> str:
    """A dump's name without its folders (reports carry no absolute paths)."""
    return os.path.basename(os.path.normpath(str(path))) if path else "-"

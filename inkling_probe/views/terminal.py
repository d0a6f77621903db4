"""The terminal view of a compare report: a table of the rows that matter, then the verdict.

By default the table holds the diverged rows, the first divergence and the culprits (``all_rows``
for every row) and fits the terminal width (``COLUMNS``): on narrow terminals the less important
columns go first, numbers are never cut. When the dumps agree it prints one summary line.
"""
from __future__ import annotations

from inkling_probe.views.format import fmt, output_width

_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "int64": "i64",
          "int32": "i32", "bool": "bool", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
          "float4_e2m1fn_x2": "fp4x2", "uint8": "u8"}
# (column, minimum terminal width to show it): the key, status and numbers always show
_OPTIONAL = {"shape": 175, "dtype": 130, "max_abs": 195, "floor": 90, "jump": 110, "step": 80, "note": 130}


def width() -> int:
    """The output width: ``COLUMNS``, else the terminal's, else 160 (views/format.py)."""
    return output_width()


def render(out, report, all_rows: bool = False, replayed=None) -> None:
    """Print the table (when anything is worth a row) and the verdict to the rich console ``out``."""
    marks = _marks(report)
    rows = [r for r in report.rows + report.control_rows if all_rows or r.diverged or id(r) in marks]
    if rows:
        out.print(_table(report, rows, marks, width()))
    verdict(out, report, replayed)


def _marks(report) -> dict:
    marks = {}
    if report.first_divergence is not None:
        marks[id(report.first_divergence)] = "FIRST"
    for i, c in enumerate(report.culprits):
        tag = "CULPRIT" if i == 0 else f"CULPRIT#{i + 1}"
        marks[id(c)] = tag + (",FIRST" if c is report.first_divergence else "")
    return marks


def _table(report, rows, marks, cols: int):
    from rich.table import Table

    shown = [c for c, w in _OPTIONAL.items() if cols >= w]
    title = f"{report.cand} vs {report.ref}" + (f" (control {report.control})" if report.control else "")
    table = Table(title=title if cols >= 100 else None, show_lines=False, width=min(cols, 220))
    table.add_column("key", overflow="fold", min_width=20 if cols >= 90 else 10, max_width=36)
    for name in ("step", "shape", "dtype"):
        if name in shown:
            table.add_column(name, no_wrap=True)
    for name in ("rel_rms", "max_abs", "floor", "threshold", "score", "jump"):
        if name in shown or name not in _OPTIONAL:
            table.add_column(name, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    if "note" in shown:
        table.add_column("note", overflow="fold", ratio=1, min_width=24)
    for r in rows:
        table.add_row(*_cells(r, marks, shown), style=_style(r, report))
    return table


def _cells(r, marks: dict, shown) -> list[str]:
    m = r.metrics
    ref, cand = _SHORT.get(r.ref_dtype, r.ref_dtype), _SHORT.get(r.cand_dtype, r.cand_dtype)
    cells = [r.key + ("" if r.against == "reference" else " (vs control)")]
    optional = {"step": str(r.step), "shape": "x".join(map(str, r.shape)),
                "dtype": ref if ref == cand else f"{ref}/{cand}"}
    cells += [optional[c] for c in ("step", "shape", "dtype") if c in shown]
    nums = {"rel_rms": fmt(m.rel_rms if m else None, 3), "max_abs": fmt(m.max_abs if m else None, 3),
            "floor": fmt(r.floor, 3), "threshold": fmt(r.threshold, 3), "score": fmt(r.score, 3),
            "jump": fmt(r.jump, 3)}
    cells += [v for c, v in nums.items() if c in shown or c not in _OPTIONAL]
    cells.append(marks.get(id(r), "") or r.status)
    if "note" in shown:
        cells.append(r.note)
    return cells


def _style(r, report) -> str | None:
    if report.culprits and r is report.culprits[0]:
        return "bold red"
    if r in report.culprits:
        return "red"
    if r is report.first_divergence:
        return "bold yellow"
    return "red" if r.diverged else None


def verdict(out, report, replayed=None) -> None:
    """The summary lines under the table."""
    from rich.markup import escape

    unchecked = report.unchecked
    if not report.diverged and not unchecked:
        cov = getattr(report, "coverage", None)
        judged = ""
        if callable(cov):
            c = cov()
            if c["rows_recorded"]:
                judged = f"; judged {c['rows_judged']} of {c['rows_recorded']} key rows"
                if c.get("rows_loose"):
                    judged += f", {c['rows_loose']} of them loosely (see the note)"
        out.print(f"[green]within tolerance[/green]: {len(report.rows)} keys agree "
                  f"(metric {report.metric}{', control ' + report.control if report.control else ''}{judged})")
    fd = report.first_divergence
    if fd is not None:
        out.print(f"[bold yellow]first divergence[/bold yellow]: {escape(fd.key)} step {fd.step} "
                  f"({report.metric} {fmt(fd.error)}, allowance {fmt(fd.threshold)}, score {fmt(fd.score)})")
    for i, cu in enumerate(report.culprits):
        why = {"clean_inputs": "inputs within tolerance", "own_relation": "a relation its inputs do not show",
               "below_allowance": "under its allowance, amplified downstream"}.get(
            cu.born, f"{fmt(cu.jump)}x what its inputs carry")
        label = "culprit" if i == 0 else f"culprit #{i + 1}"
        out.print(f"[bold red]{label}[/bold red]: {escape(cu.key)} step {cu.step}: error born here "
                  f"(score {fmt(cu.score)}, {why})")
    for e in report.explanations:
        against = "" if e["against"] == "reference" else " (vs control)"
        for f in e["findings"] or [{"summary": "no hypothesis holds"}]:
            out.print(f"  [cyan]explain[/cyan] {escape(e['key'] + against)}: {escape(f['summary'])}")
    for f in report.rank_findings:
        extra = f" (rel_rms {fmt(f.get('rel_rms'))})" if f.get("rel_rms") is not None else ""
        out.print(f"  [magenta]ranks[/magenta] {escape(f['dump'] + ' ' + f['key'])} step {f['step']}: "
                  f"{escape(f['note'])}{extra}")
    if unchecked:
        keys = sorted({r.key for r in unchecked})
        out.print(f"[bold magenta]could not check[/bold magenta] {len(unchecked)} row(s) "
                  f"({escape(', '.join(keys[:6]))}{' ...' if len(keys) > 6 else ''}): not within tolerance")
        if getattr(report, "unchecked_reason", ""):
            out.print(f"  unchecked: {escape(report.unchecked_reason)}")
    for note in report.notes[:6]:
        out.print(f"  note: {escape(note)}")
    only(out, "only in the reference", report.only_ref)
    only(out, "only in the candidate", report.only_cand)
    if replayed is not None:
        for line in replayed.get("lines", []):
            out.print(f"  [blue]replay[/blue] {escape(line)}")


def only(out, what: str, items) -> None:
    """Keys on one side only, summarised by kind: module inputs, whole modules, missing steps."""
    if not items:
        return
    inputs = [k for k, _ in items if ".in." in k or k.startswith("in.")]
    keys = sorted({k for k, _ in items if k not in set(inputs)})
    steps = sorted({s for _, s in items})
    parts = []
    if keys:
        parts.append(f"{len(keys)} key(s) e.g. {', '.join(keys[:4])}")
    if inputs:
        parts.append(f"{len(inputs)} recorded module input(s)")
    parts.append(f"steps {steps[:6]}{' ...' if len(steps) > 6 else ''}")
    out.print(f"{what} ({len(items)}): " + "; ".join(parts), markup=False)

"""The human view of a compare report: a rich table in execution order, then the verdict."""
from __future__ import annotations

from inkling_probe.cli.common import fmt


def _cells(r, marks: dict) -> list[str]:
    m = r.metrics
    dt = r.ref_dtype if r.ref_dtype == r.cand_dtype else f"{r.ref_dtype}/{r.cand_dtype}"
    mark = marks.get(id(r), "")
    return [r.key + ("" if r.against == "reference" else " (vs control)"), str(r.step), "x".join(map(str, r.shape)),
            dt, fmt(m.rel_rms if m else None, 3), fmt(m.cosine if m else None, 6), fmt(m.max_abs if m else None, 3),
            fmt(r.floor, 3), fmt(r.threshold, 3), fmt(r.score, 3),
            fmt(r.jump, 3), r.status + (f" {mark}" if mark else ""), r.note]


def _style(r, report) -> str | None:
    if r is report.culprit:
        return "bold red"
    if r is report.first_divergence:
        return "bold yellow"
    return "red" if r.diverged else None


def render(out, report, diverged_only: bool = False, replayed=None) -> None:
    from rich.table import Table

    marks = {}
    if report.first_divergence is not None:
        marks[id(report.first_divergence)] = "<- first"
    if report.culprit is not None:
        marks[id(report.culprit)] = "<- culprit" + (" & first" if report.culprit is report.first_divergence else "")
    table = Table(title=f"{report.cand} vs {report.ref}" + (f" (control {report.control})" if report.control else ""),
                  show_lines=False)
    for name in ("key", "step", "shape", "dtype", "rel_rms", "cosine", "max_abs", "floor",
                 "threshold", "score", "jump", "status", "note"):
        table.add_column(name, justify="left" if name in ("key", "dtype", "shape", "status", "note") else "right",
                         no_wrap=name != "note", overflow="fold")
    rows = report.rows + report.control_rows
    for r in rows:
        if diverged_only and not (r.diverged or id(r) in marks):
            continue
        table.add_row(*_cells(r, marks), style=_style(r, report))
    out.print(table)
    _verdict(out, report, replayed)


def _verdict(out, report, replayed) -> None:
    metric = report.metric
    if report.first_divergence is None and not report.diverged:
        out.print(f"[green]within tolerance[/green]: {len(report.rows)} keys, metric {metric}")
    fd, cu = report.first_divergence, report.culprit
    if fd is not None:
        out.print(f"[bold yellow]first divergence[/bold yellow]: {fd.key} step {fd.step} "
                  f"({metric} {fmt(fd.error)} > threshold {fmt(fd.threshold)})")
    if cu is not None:
        out.print(f"[bold red]culprit[/bold red]: {cu.key} step {cu.step}: error born here "
                  f"(score {fmt(cu.score)}, inputs {fmt(cu.score_in)}, jump {fmt(cu.jump)})")
    for e in report.explanations:
        against = "" if e["against"] == "reference" else " (vs control)"
        for f in e["findings"]:
            out.print(f"  [cyan]explain[/cyan] {e['key']}{against}: {f['summary']}", markup=True)
        if not e["findings"]:
            out.print(f"  [cyan]explain[/cyan] {e['key']}{against}: no hypothesis holds")
    for f in report.rank_findings:
        out.print(f"  [magenta]ranks[/magenta] {f['dump']} {f['key']} step {f['step']}: {f['note']}"
                  + (f" (rel_rms {fmt(f.get('rel_rms'))})" if f.get("rel_rms") is not None else ""))
    _listing(out, "only in the reference", report.only_ref)
    _listing(out, "only in the candidate", report.only_cand)
    if replayed is not None:
        for line in replayed.get("lines", []):
            out.print(f"  [blue]replay[/blue] {line}")


def _listing(out, what: str, items, limit: int = 12) -> None:
    if not items:
        return
    shown = ", ".join(f"{k}@{s}" for k, s in items[:limit])
    more = f" ... {len(items) - limit} more" if len(items) > limit else ""
    out.print(f"{what} ({len(items)}): {shown}{more}", markup=False)

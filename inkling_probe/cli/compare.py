"""``inkling-probe compare REF CAND``: where, and why, the candidate leaves the reference.

Exit status: 0 within tolerance, 1 a divergence was found, 2 bad input (one line naming it).
"""
from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, console, emit_json, fmt, open_dump

METRICS = ("rel_rms", "cosine", "max_abs", "max_rel", "outside")


@click.command("compare")
@click.argument("ref", type=click.Path())
@click.argument("cand", type=click.Path())
@click.option("--control", type=click.Path(), default=None,
              help="A second reference differing from REF only in a benign factor (fp32 vs bf16, TP=1 vs "
                   "TP=2): its error per key is the noise floor.")
@click.option("--map", "name_map", default=None,
              help="Name map applied to every dump's keys: a TOML file or a shipped map's name.")
@click.option("--metric", type=click.Choice(METRICS), default="rel_rms", show_default=True,
              help="The error that decides divergence (cosine: 1 - cos).")
@click.option("--threshold", type=float, default=None,
              help="Replaces the dtype default: a key diverges where error > max(THRESHOLD, K x floor).")
@click.option("-k", "k", type=float, default=2.0, show_default=True, help="Allowed multiple of the control's floor.")
@click.option("--include", multiple=True, help="Only keys matching this glob (after --map); repeatable.")
@click.option("--step", "steps", type=int, multiple=True, help="Only this step; repeatable.")
@click.option("--diverged-only", is_flag=True, help="Table rows: only diverged keys (and the culprit).")
@click.option("--no-explain", is_flag=True, help="Skip the hypotheses (explain) on the culprit.")
@click.option("--replay", "replay_key", default=None,
              help="Also run the candidate module KEY on REF's recorded inputs (needs --ckpt).")
@click.option("--ckpt", type=click.Path(), default=None, help="Candidate checkpoint dir for --replay.")
@click.option("--factory", default=None,
              help="MODULE:FUNCTION or registered name building the --replay module (default: the registered one).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(ref, cand, control, name_map, metric, threshold, k, include, steps, diverged_only, no_explain,
            replay_key, ckpt, factory, as_json):
    """Compare dump CAND against dump REF: the first divergence, the culprit and why.

    Keys align through --map, by step, call and token (the common tokens when the runs batched
    differently); TP dumps are reassembled. Exit 0 within tolerance, 1 on divergence, 2 on bad input.
    """
    from inkling_probe.compare import compare
    from inkling_probe.errors import ProbeError

    if metric == "max_abs" and threshold is None and control is None:
        raise BadInput("--metric max_abs has no dtype default: pass --threshold or --control")
    if replay_key and not ckpt:
        raise BadInput("--replay needs --ckpt (the candidate's checkpoint dir)")
    dumps = [open_dump(p) for p in (ref, cand)] + ([open_dump(control)] if control else [])
    try:
        with _progress(not as_json) as progress:
            report = compare(dumps[0], dumps[1], dumps[2] if control else None, name_map=name_map, metric=metric,
                             threshold=threshold, k=k, include=include or None, steps=set(steps) or None,
                             explain=not no_explain, progress=progress)
        replayed = _replay(replay_key, ckpt, factory, dumps[0]) if replay_key else None
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    finally:
        for d in dumps:
            d.close()
    if as_json:
        doc = report.to_dict()
        if replayed is not None:
            doc["replay"] = replayed
        emit_json(doc)
    else:
        render(console(), report, diverged_only, replayed)
    if report.diverged or (replayed is not None and replayed["diverged"]):  # SystemExit, not ctx.exit: standalone_mode=False would turn Exit into a return value
        raise SystemExit(1)


def _replay(key, ckpt, factory, ref_dump) -> dict:
    from inkling_probe.cli.replay import run_replay

    _, doc, text = run_replay(ref_dump, key, ckpt, factory)
    return {**doc, "lines": text}


class _progress:
    """A transient rich progress bar on stderr (only on a terminal); yields the callback."""

    def __init__(self, enabled: bool):
        import sys

        self.enabled = enabled and sys.stderr.isatty()
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn("comparing"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task("", total=None)
        return lambda done, total, key: self.bar.update(task, completed=done, total=total, description=key)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)


# -- the human view: a table in execution order, then the verdict -----------------------------
_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "int64": "i64",
          "int32": "i32", "bool": "bool", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
          "float4_e2m1fn_x2": "fp4x2", "uint8": "u8"}


def _cells(r, marks: dict) -> list[str]:
    m = r.metrics
    ref, cand = _SHORT.get(r.ref_dtype, r.ref_dtype), _SHORT.get(r.cand_dtype, r.cand_dtype)
    mark = marks.get(id(r), "")
    key = r.key + ("" if r.against == "reference" else " (vs control)")
    return [key, str(r.step), "x".join(map(str, r.shape)), ref if ref == cand else f"{ref}/{cand}",
            fmt(m.rel_rms if m else None, 3), fmt(m.max_abs if m else None, 3), fmt(r.floor, 3),
            fmt(r.threshold, 3), fmt(r.score, 3), fmt(r.jump, 3), mark or r.status, r.note]


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
        marks[id(report.first_divergence)] = "FIRST"
    if report.culprit is not None:
        marks[id(report.culprit)] = "CULPRIT" + (",FIRST" if report.culprit is report.first_divergence else "")
    table = Table(title=f"{report.cand} vs {report.ref}" + (f" (control {report.control})" if report.control else ""),
                  show_lines=False)
    table.add_column("key", overflow="fold", min_width=28, max_width=44)  # long keys wrap; numbers are never cut
    for name, width in (("step", 4), ("shape", 8), ("dtype", 4)):
        table.add_column(name, no_wrap=True, min_width=width)
    for name in ("rel_rms", "max_abs", "floor", "threshold", "score", "jump"):
        table.add_column(name, justify="right", no_wrap=True, min_width=8)
    table.add_column("status", no_wrap=True, min_width=8)
    table.add_column("note", overflow="fold", min_width=10, ratio=1)
    rows = report.rows + report.control_rows
    for r in rows:
        if diverged_only and not (r.diverged or id(r) in marks):
            continue
        table.add_row(*_cells(r, marks), style=_style(r, report))
    out.print(table)
    _verdict(out, report, replayed)


def _verdict(out, report, replayed) -> None:
    from rich.markup import escape

    metric = report.metric
    if report.first_divergence is None and not report.diverged:
        out.print(f"[green]within tolerance[/green]: {len(report.rows)} keys, metric {metric}")
    fd, cu = report.first_divergence, report.culprit
    if fd is not None:
        out.print(f"[bold yellow]first divergence[/bold yellow]: {escape(fd.key)} step {fd.step} "
                  f"({metric} {fmt(fd.error)} > threshold {fmt(fd.threshold)})")
    if cu is not None:
        out.print(f"[bold red]culprit[/bold red]: {escape(cu.key)} step {cu.step}: error born here "
                  f"(score {fmt(cu.score)}, inputs {fmt(cu.score_in)}, jump {fmt(cu.jump)})")
    for e in report.explanations:
        against = "" if e["against"] == "reference" else " (vs control)"
        for f in e["findings"] or [{"summary": "no hypothesis holds"}]:
            out.print(f"  [cyan]explain[/cyan] {escape(e['key'] + against)}: {escape(f['summary'])}")
    for f in report.rank_findings:
        extra = f" (rel_rms {fmt(f.get('rel_rms'))})" if f.get("rel_rms") is not None else ""
        text = f"{f['dump']} {f['key']} step {f['step']}: {f['note']}{extra}"
        out.print(f"  [magenta]ranks[/magenta] {escape(text)}")
    _listing(out, "only in the reference", report.only_ref)
    _listing(out, "only in the candidate", report.only_cand)
    if replayed is not None:
        for line in replayed.get("lines", []):
            out.print(f"  [blue]replay[/blue] {escape(line)}")


def _listing(out, what: str, items, limit: int = 12) -> None:
    """Keys on one side only; recorded module inputs (``.in.``) are counted, not listed."""
    if not items:
        return
    keys = [(k, s) for k, s in items if ".in." not in k and not k.startswith("in.")]
    inputs = len(items) - len(keys)
    shown = ", ".join(f"{k}@{s}" for k, s in keys[:limit])
    more = f" ... {len(keys) - limit} more" if len(keys) > limit else ""
    tail = f"{'; ' if keys else ''}{inputs} recorded module inputs (KEY.in.*)" if inputs else ""
    out.print(f"{what} ({len(items)}): {shown}{more}{tail}", markup=False)

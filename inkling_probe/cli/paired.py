"""``inkling-probe paired``: two systems' per-item eval results, paired; the gate as the exit code."""
from __future__ import annotations

import click

from inkling_probe.cli.common import Real, Whole, console
from inkling_probe.views.format import fmt
from inkling_probe.cli.eval_output import conclude


@click.command("paired")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--gate", type=Real(min=0), default=0.02, show_default=True,
              help="Pass when the pooled |delta| = |mean(B) - mean(A)| is at most this.")
@click.option("--seed", type=Whole(min=0), default=0, show_default=True, help="Bootstrap seed (the CI is reproducible).")
@click.option("--resamples", type=Whole(min=100), default=10000, show_default=True, help="Bootstrap resamples.")
@click.option("--level", type=Real(0.5, 0.999), default=0.95, show_default=True, help="CI level.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def command(ctx, a, b, gate, seed, resamples, level, as_json):
    """Compare B against A item by item (JSON lines: id, correct or score, optional seed).

    Flips both ways, the exact McNemar p, delta = mean(B) - mean(A) with a seeded bootstrap CI, per
    seed and pooled. Exit 0 when |delta| <= --gate, 1 when not, 2 on bad input.
    """
    from inkling_probe.evals import paired

    conclude(ctx, lambda: paired.compare(paired.load(a), paired.load(b), gate, seed, resamples, level),
             as_json, _print, lambda report: not report.passed)


def _print(report) -> None:
    from rich.table import Table

    unit = "accuracy" if report.kind == "correct" else "mean score"
    table = Table(title=f"B {report.b} vs A {report.a} ({unit})", title_justify="left")
    for col in ("seed", "n", "A", "B", "delta", f"{report.bootstrap['level']:.0%} CI", "A only", "B only", "McNemar p"):
        table.add_column(col, justify="left" if col == "seed" else "right")
    for p in [*report.per_seed, report.pooled]:
        table.add_row(str(p.seed), str(p.n), fmt(p.mean_a), fmt(p.mean_b), f"{p.delta:+.4f}",
                      f"[{p.ci[0]:+.4f}, {p.ci[1]:+.4f}]", str(p.a_only), str(p.b_only), fmt(p.mcnemar_p),
                      style="bold" if p is report.pooled else None)
    out = console()
    out.print(table)
    for side, items in (("A", report.only_a), ("B", report.only_b)):
        if items:
            shown = ", ".join(str(i[1]) if i[0] is None else f"{i[1]} (seed {i[0]})" for i in items[:8])
            out.print(f"[yellow]{len(items)} item(s) in {side} only, not paired: {shown}"
                      f"{' ...' if len(items) > 8 else ''}[/yellow]")
    verdict = "[green]PASS[/green]" if report.passed else "[red]FAIL[/red]"
    out.print(f"{verdict}: |delta| {abs(report.pooled.delta):.4f} {'<=' if report.passed else '>'} gate {report.gate}")

"""``inkling-probe health``: end-of-sequence, runaway, collapse and non-finite logits in a gen-log."""
from __future__ import annotations

import click

from inkling_probe.cli.common import Real, Whole, console
from inkling_probe.cli.eval_output import conclude


@click.command("health")
@click.argument("gen_log", type=click.Path())
@click.option("--eos", "eos", type=Whole(min=0), multiple=True, metavar="ID",
              help="End-of-sequence id (repeatable), added to the ids the gen-log names.")
@click.option("--max-run", type=Whole(min=2), default=8, show_default=True,
              help="Collapse: this many equal tokens in a row.")
@click.option("--ngram", type=Whole(min=1), default=4, show_default=True, help="n of the repetition rate.")
@click.option("--max-repeat", type=Real(0, 1), default=0.5, show_default=True,
              help="Collapse: this share of n-grams repeating an earlier one.")
@click.option("--fail-capped", is_flag=True,
              help="A capped response (the token cap reached, an end id known and never emitted) is unhealthy.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def command(ctx, gen_log, eos, max_run, ngram, max_repeat, fail_capped, as_json):
    """Check every response of GEN_LOG (JSON lines from `run --gen-log`): finish reason, end ids emitted
    but not honoured, the token cap (capped: an end id is known and was never emitted, healthy unless
    --fail-capped; runaway: no end id known, or one emitted and not honoured), collapse, non-finite
    logits. Exit 0 all healthy, 1 any response unhealthy, 2 bad input."""
    from inkling_probe.evals import health

    limits = health.Limits(max_run, ngram, max_repeat, fail_capped=fail_capped)
    conclude(ctx, lambda: health.summarize(gen_log, list(eos), limits),
             as_json, _print, lambda summary: bool(summary.unhealthy))


def _print(summary) -> None:
    from rich.markup import escape
    from rich.table import Table

    d = summary.to_dict()
    out = console()
    mix = ", ".join(f"{k} {v}" for k, v in d["finish_reasons"].items())
    capped = (f"; {d['capped']} capped (token cap reached, end id never emitted"
              f"{'' if any('capped' in p for r in summary.responses for p in r.problems) else ': healthy'})"
              if d["capped"] else "")
    out.print(f"{escape(summary.path)}: {d['n']} responses ({mix}); [{'red' if d['unhealthy'] else 'green'}]"
              f"{d['unhealthy']} unhealthy[/]{capped}")
    if not summary.unhealthy:
        return
    table = Table(title="worst offenders", title_justify="left")
    for col in ("id", "finish", "tokens", "longest run", "repeat", "problems"):
        table.add_column(col, justify="left" if col in ("id", "finish", "problems") else "right")
    for r in summary.worst():
        table.add_row(escape(str(r.id)), r.finish_reason, str(r.n_tokens), str(r.longest_run),
                      f"{r.repeat_rate:.0%}", escape("; ".join(r.problems)))
    out.print(table)

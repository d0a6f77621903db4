"""``inkling-probe parity``: teacher-forced and free-run comparison of two runs' logits."""
from __future__ import annotations

import click

from inkling_probe.cli.common import Real, console
from inkling_probe.cli.eval_output import conclude


@click.command("parity")
@click.argument("ref", type=click.Path())
@click.argument("cand", type=click.Path())
@click.option("--key", default="logits", show_default=True, help="The logits key of both dumps.")
@click.option("--near-tie", type=Real(min=0), default=0.05, show_default=True,
              help="A mismatch is a near-tie when the reference's margin between the two tokens is below "
                   "this fraction of that position's logit standard deviation.")
@click.option("--strict", is_flag=True, help="Exit 1 on any mismatch or free-run divergence, near-ties included.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def command(ctx, ref, cand, key, near_tie, strict, as_json):
    """Compare CAND's logits with REF's over the same token stream (dumps of one request each, from
    `run --tokens ... --max-new-tokens N`): argmax agreement per teacher-forced position, each mismatch
    a near-tie or confident, the free-run divergence and collapse after it, and logit checksums.
    Exit 1 when a confident mismatch is found (any difference with --strict), 0 otherwise, 2 on bad input."""
    from inkling_probe.evals import parity

    def failed(result) -> bool:
        return result.count("confident") > 0 or (strict and bool(result.mismatches or result.diverged_at is not None))

    conclude(ctx, lambda: parity.compare(parity.load_steps(ref, key), parity.load_steps(cand, key), near_tie),
             as_json, lambda result: _print(ref, cand, result.to_dict()), failed,
             lambda result: {"ref": ref, "cand": cand, "key": key, **result.to_dict()})


def _print(ref: str, cand: str, d: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    out.print(f"{escape(cand)} vs {escape(ref)}: {d['positions']} teacher-forced positions, "
              f"tf_mismatch / near-tie / confident = {d['tf_mismatch']} / {d['near_tie']} / {d['confident']} "
              f"(near-tie: margin < {d['near_tie_threshold']} x the position's logit std)")
    if d["mismatches"]:
        table = Table(title_justify="left")
        for col in ("step", "row", "ref token", "cand token", "ref margin", "threshold", "class"):
            table.add_column(col, justify="left" if col == "class" else "right")
        for m in d["mismatches"]:
            table.add_row(str(m["step"]), str(m["row"]), str(m["ref_token"]), str(m["cand_token"]),
                          f"{m['ref_margin']:.4g}", f"{m['threshold']:.4g}", m["kind"],
                          style="red" if m["kind"] == "confident" else None)
        out.print(table)
    fr = d["free_run"]
    if fr["diverged_at"] is None:
        out.print(f"free run: the same {min(len(fr['ref_tokens']), len(fr['cand_tokens']))} tokens")
    else:
        ca = fr["cand_after"]
        out.print(f"free run: diverged at token {fr['diverged_at']}; after it the candidate's longest run of one "
                  f"token is {ca['longest_run']}, 4-gram repetition {ca['repeat_rate_4']:.0%}")
    c = d["checksum"]
    out.print(f"checksums: ref {c['ref']}, cand {c['cand']}" + (" [green]identical[/green]" if c["identical"] else ""))
    for n in d["notes"]:
        out.print(f"[yellow]{escape(n)}[/yellow]")

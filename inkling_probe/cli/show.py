"""``inkling-probe show``: one tensor's statistics, a small slice and a terminal histogram."""
from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, Whole, console, emit_json, open_dump
from inkling_probe.views.format import finite_or_none, fmt


MAX_BINS = 4096  # a terminal line a bin; 10**11 bins asked numpy for 745 GiB (exit 3)


@click.command("show")
@click.argument("dump", type=click.Path())
@click.argument("key")
@click.option("--step", type=Whole(min=0), default=0, show_default=True, help="Step id.")
@click.option("--call", type=Whole(min=0), default=0, show_default=True, help="Which call of KEY within the step.")
@click.option("--rank", type=Whole(min=0), default=None, help="One rank's shard instead of the global view.")
@click.option("--slice", "slice_text", default=None, help="Numpy-style slice to print, e.g. '0:4,:8'.")
@click.option("--bins", default=24, show_default=True, type=Whole(min=1, max=MAX_BINS), help="Histogram bins.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(dump, key, step, call, rank, slice_text, bins, as_json):
    """Show KEY of DUMP: statistics over its values, a slice and a histogram.

    Reads with numpy alone: bf16 values are shown as their exact float32, 8-bit floats as float16,
    packed fp4 as its bytes.
    """
    from inkling_probe.array_summary import histogram, parse_slice, value_stats
    from inkling_probe.errors import ProbeError

    d = open_dump(dump)
    try:
        values = d.array(key, step=step, rank=rank, call=call)
        dtype = d.rows(key, step, call)[0]["dtype"]
    except ProbeError as e:
        raise BadInput(str(e)) from None
    stats = value_stats(values)
    try:
        shown = values[parse_slice(slice_text, values.ndim)] if slice_text else _corner(values)
    except (ValueError, IndexError) as e:
        raise BadInput(f"--slice {slice_text!r}: {e}") from None
    hist = histogram(values, bins)
    if as_json:
        emit_json({"key": key, "step": step, "rank": rank, "dtype": dtype,
                   "shape": list(values.shape), "stats": {k: finite_or_none(v) for k, v in stats.items()},
                   "slice": shown.astype(float).tolist(), "histogram": hist})
        return
    _print(console(), key, step, dtype, values, stats, shown, hist)


def _corner(t):
    """The first few entries along each dim (at most 4 rows x 8 columns)."""
    if t.ndim == 0:
        return t
    index = tuple(slice(0, 1) for _ in range(max(t.ndim - 2, 0))) + tuple(
        slice(0, n) for n in ((4, 8) if t.ndim >= 2 else (8,)))
    return t[index]


def _print(out, key, step, dtype, t, stats, shown, hist) -> None:
    from rich.table import Table

    out.print(f"[bold]{key}[/bold]  step {step}  {dtype}  shape {list(t.shape)}")
    table = Table(show_header=True)
    for name in stats:
        table.add_column(name, justify="right")
    table.add_row(*(fmt(v) for v in stats.values()))
    out.print(table)
    out.print(f"slice {list(shown.shape)}:")
    out.print(str(shown.astype(float).round(6)), markup=False)
    if hist["counts"]:
        width = 40
        top = max(hist["counts"]) or 1
        out.print("histogram (finite values):")
        for lo, hi, n in zip(hist["edges"][:-1], hist["edges"][1:], hist["counts"]):
            out.print(f"  [{lo: .4g}, {hi: .4g})  {'█' * round(width * n / top):<{width}} {n}", markup=False)

"""``inkling-probe bisect elements``: which experts, row blocks and NVFP4 blocks of two tensors differ."""
from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, emit_json


def _render(result: dict) -> None:
    from inkling_probe.bisect.elements import region_lines

    for row in result["diverged_keys"]:
        what = " (NVFP4 codes)" if row["nvfp4_codes"] else ""
        click.echo(f"{row['key']} {row['dtype']}{row['shape']}{what}: {row['diverged']} of {row['elements']} "
                   "elements diverged" + (f" ({row['mismatch']})" if row.get("mismatch") else ""))
        for line in region_lines(row["regions"], 1):
            click.echo(line)
    for side in ("only_a", "only_b"):
        if result[side]:
            click.echo(f"{len(result[side])} keys only in {'A' if side == 'only_a' else 'B'}: {', '.join(result[side][:5])}")
    click.echo(f"{result['diverged']} of {result['elements']} elements diverged "
               f"({len(result['diverged_keys'])} of {result['keys']} keys)")


@click.command("elements")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--key", "keys", default=None, metavar="GLOBS", help="Only these keys (comma-separated globs).")
@click.option("--step", type=int, default=0, show_default=True, help="Step of a dump to read.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(a, b, keys, step, as_json):
    """Bit-exact differences of two dumps or two checkpoints (safetensors), split by expert, row block
    and 16-element NVFP4 block; exit 1 when any element differs."""
    from inkling_probe.bisect.elements import bisect_elements
    from inkling_probe.errors import ProbeError

    try:
        result = bisect_elements(a, b, keys, step)
    except ProbeError as e:
        raise BadInput(str(e)) from None
    emit_json(result) if as_json else _render(result)
    if result["diverged"]:
        raise SystemExit(1)

"""``inkling-probe import SRC DST``: a foreign dump (SGLang's dumper, .pt, .safetensors, .npz, .npy)
written into our HDF5 store, for speed and sharing (docs/INTEROP.md).

Exit status: 0 written, 2 bad input (one line naming it).
"""
from __future__ import annotations

import os

import click

from inkling_probe.cli.common import BadInput, emit_json


@click.command("import")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--map", "name_map", default=None,
              help="Name map read with SRC: canonical keys, shard layouts, fused tensors split (a TOML file "
                   "or a shipped map: sglang_inkling, vllm_inkling, trtllm_inkling). Default: SRC's "
                   "inkling_probe.toml, else none.")
@click.option("--pattern", default=None,
              help="Regex over each file's path in SRC with named groups key, step, rank, call, e.g. "
                   r"'step(?P<step>\d+)/(?P<key>.+)\.rank(?P<rank>\d+)\.pt'.")
@click.option("--param", "params", multiple=True, metavar="NAME=N",
              help="A model size the map's splits use (its [foreign.params]), e.g. kv_heads=16; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(src, dst, name_map, pattern, params, as_json):
    """Convert the foreign dump SRC into a new inkling-probe dump at DST."""
    from inkling_probe.errors import ProbeError
    from inkling_probe.store.foreign import is_foreign, open_foreign
    from inkling_probe.store.foreign.convert import convert

    values = parse_params(params)
    if os.path.lexists(src) and not is_foreign(src):
        raise BadInput(f"{src}: already an inkling-probe dump (or not a file or folder to import)")
    try:
        dump = open_foreign(src, name_map=name_map, pattern=pattern, params=values or None)
        try:
            done = convert(dump, dst)
        finally:
            dump.close()
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    if as_json:
        emit_json({"src": src, "dst": dst, "kind": dump.kind, **done})
    else:
        click.echo(f"imported {done['tensors']} tensors ({done['keys']} keys, ranks {done['ranks']}) "
                   f"from {src} ({dump.kind}) into {dst}")


def parse_params(items) -> dict:
    """``("kv_heads=16",)`` -> {"kv_heads": 16}; a bad item is a one-line BadInput."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.strip().isdigit() or int(value) <= 0:
            raise BadInput(f"--param {item!r}: expected NAME=N with N a positive integer")
        out[name.strip()] = int(value)
    return out

"""``inkling-probe make-checkpoint``: write a random checkpoint in the native Inkling layout."""

from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, Whole

PRESETS = ("tiny", "small", "full")
MAX_BYTES = 16 * 2**30  # refuse layouts larger than this (the full preset is ~1.4 TB in bf16)


def _layout_bytes(config) -> int:
    from inkling_model.checkpoint.layout import native_shapes

    total = 0
    for shape, dtype in native_shapes(config).values():
        n = 1
        for d in shape:
            n *= d
        total += n * dtype.itemsize
    return total


def torch_numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _config(preset: str, quant: str | None):
    from inkling_model.config import InklingConfig

    try:
        return InklingConfig.preset(preset, quant_method=quant)
    except ValueError as e:
        raise BadInput(str(e)) from None


@click.command("make-checkpoint")
@click.option("--preset", required=True, metavar="NAME", help=f"Model shapes: {', '.join(PRESETS)}.")
@click.option("--quant", type=click.Choice(["nvfp4"]), default=None,
              help="Quantize the routed experts of MoE layers >= quant_first_layer (3), calibrated on the bf16 model.")
@click.option("--seed", type=Whole(min=0), default=0, show_default=True,
              help="Random seed; the same seed gives the same bf16 weights with or without --quant.")
@click.option("--multimodal", is_flag=True,
              help="Also write the vision and audio towers (bf16; transformers' InklingForConditionalGeneration "
                   "layout, nested config.json): small towers for tiny/small, the real layout for full.")
@click.argument("out", type=click.Path(file_okay=False))
def command(preset: str, quant: str | None, seed: int, out: str, multimodal: bool = False) -> None:
    """Write a random Inkling checkpoint (safetensors, index, config.json, generation_config.json) to OUT.

    OUT must not exist or be empty. Nothing is downloaded.
    """
    from pathlib import Path

    from inkling_model.checkpoint.shards import CheckpointExistsError
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    p = Path(out)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise BadInput(f"{out} exists and is not empty; refusing to overwrite it")
    config = _config(preset, quant)
    size = _layout_bytes(config)
    mm = None
    if multimodal:
        from inkling_model.multimodal.checkpoint import tower_shapes
        from inkling_model.multimodal.config import MultimodalConfig

        mm = MultimodalConfig.preset(preset, config)
        size += sum(torch_numel(s) * d.itemsize for s, d in tower_shapes(mm).values())
    if size > MAX_BYTES:
        raise BadInput(f"preset {preset!r} makes a {size / 2**30:.0f} GiB checkpoint; "
                       f"make-checkpoint writes at most {MAX_BYTES // 2**30} GiB (use tiny or small)")
    from inkling_probe.cli.common import console

    con = console()
    try:
        with con.status("writing checkpoint") as status:
            if mm is not None:
                from inkling_model.multimodal.checkpoint import write_multimodal_checkpoint

                write_multimodal_checkpoint(config, mm, p, seed=seed, quant=quant, progress=status.update)
            else:
                write_random_checkpoint(config, p, seed=seed, quant=quant, progress=status.update)
    except CheckpointExistsError as e:
        raise BadInput(str(e)) from None
    except ImportError as e:
        raise BadInput(f"--quant nvfp4 calibrates on transformers' Inkling, which did not import: {e}") from None
    con.print(f"wrote {preset} {'multimodal ' if mm else ''}checkpoint{' (NVFP4 routed experts)' if quant else ''}, "
              f"seed {seed}, {size / 2**20:.1f} MiB: {p}")

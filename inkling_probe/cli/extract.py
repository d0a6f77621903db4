"""``inkling-probe extract REPORT_DIR``: a standalone pytest file for the culprit (no model run,
no checkpoint, no GPU needed to run it).

Writes FILE (the fixed test template) and FILE.json, FILE.safetensors beside it (the data).
Exit status: 0 when written, 2 on bad input (one line naming it): a damaged report folder, a
``--ckpt`` that is not the candidate's checkpoint, an output that exists or is a symbolic link.
"""
from __future__ import annotations

import os

import click

from inkling_probe.cli.common import BadInput


@click.command("extract")
@click.argument("report_dir", type=click.Path())
@click.option("--key", default=None, help="The key to extract (default: the report's first culprit).")
@click.option("--ckpt", type=click.Path(), default=None,
              help="The candidate's checkpoint: its tensors for the culprit module go beside the test, which "
                   "then rebuilds the module (without it: the tensor-level check). Refused when the candidate's "
                   "dump recorded another checkpoint.")
@click.option("--factory", default=None,
              help="MODULE:FUNCTION or registered name (group inkling_probe.extract_factories) describing "
                   "the module (default: the registered one).")
@click.option("-o", "--out", default=None, type=click.Path(),
              help="The pytest file to write (default: REPORT_DIR/test_repro.py; it, FILE.json and "
                   "FILE.safetensors must not exist).")
def command(report_dir, key, ckpt, factory, out):
    """Write a pytest file that checks the culprit op alone: the module rebuilt from the checkpoint
    tensors it loads and run on the reference's recorded inputs (or, where it can't be rebuilt, the
    recorded tensors), against the reference's outputs, with compare's tolerance for that key."""
    from inkling_probe.bundle.extract import extract
    from inkling_probe.errors import ProbeError

    out = out or os.path.join(report_dir, "test_repro.py")
    if os.path.lexists(out):
        raise BadInput(f"-o {out}: already exists (a file or a link); choose another file")
    if ckpt and not os.path.isdir(ckpt):
        raise BadInput(f"--ckpt {ckpt}: no such directory")
    try:
        done = extract(report_dir, out, key=key, ckpt=ckpt, factory=factory)
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    click.echo(f"wrote {done.path} ({os.path.getsize(done.path) / 1024:.0f} KiB): {done.kind} check of {done.key}; "
               f"{done.why}")
    verdict = "fails here, as it should while the bug is there" if done.fails_now else \
        "passes here: the bug does not show in this process (switched off, or not in this module)"
    if done.kind == "tensor":
        verdict += "; a tensor check compares recorded tensors and cannot pass after a fix"
    click.echo(f"check: rel_rms {done.error:.4g} vs tolerance {done.tolerance:.4g}, with the candidate's settings: "
               f"{verdict}")
    if done.checkpoint == "not recorded":
        click.echo("note: --ckpt not checked against the candidate: its dump records no checkpoint identity")
    click.echo(f"run it: python -m pytest -q {done.path}")

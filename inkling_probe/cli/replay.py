"""``inkling-probe replay REF KEY --ckpt DIR``: run the candidate module KEY on REF's recorded inputs.

The local error of one module, with no upstream contamination; when its output diverges, the
parameter layout permutations are tried (a permutation that fixes it names a weight-loading bug).
Also reachable as ``inkling-probe compare REF CAND --replay KEY --ckpt DIR``.

The candidate module comes from a factory ``build(ckpt, key, dtype) -> torch.nn.Module``:
``--factory MODULE:FUNCTION`` for any engine, or a factory registered in the
``inkling_probe.replay_factories`` entry-point group (inkling_model's builds the model at TP=1 from
the checkpoint, faults planted through ``INKLING_FAULT`` as for ``inkling-probe run``, and returns
its submodule at the module path KEY).
"""
from __future__ import annotations

import click

from inkling_probe.cli.common import BadInput, Whole, console, emit_json, open_dump
from inkling_probe.views.format import fmt


def load_factory(spec: str | None):
    """``MODULE:FUNCTION``, a factory's entry-point name, or (None) the one registered factory.

    Models register theirs in the ``inkling_probe.replay_factories`` entry-point group (inkling_model
    registers ``inkling_model``), so the toolkit itself never imports a model.
    """
    from inkling_probe import plugins

    try:
        return plugins.load(plugins.REPLAY_FACTORIES, spec, "--factory")
    except plugins.PluginInputError as e:
        raise BadInput(str(e)) from None


def run_replay(ref_dump, key: str, ckpt: str, factory=None, dtype_name: str | None = None, step: int = 0):
    """Build the candidate module and replay it; returns (ReplayResult, its JSON dict, text lines)."""
    import torch

    from inkling_probe.compare.replay import recorded_inputs, replay
    from inkling_probe.errors import ProbeError

    try:
        args, kwargs = recorded_inputs(ref_dump, key, step)
    except ProbeError as e:
        raise BadInput(str(e)) from None
    if not args and not kwargs:
        raise BadInput(f"{ref_dump.path}: no recorded inputs for {key!r} step {step} "
                       f"(record the reference with inputs: {key}.in.0 ...)")
    if dtype_name:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    else:
        floats = [a.dtype for a in args if a.is_floating_point()]
        dtype = floats[0] if floats else torch.float32
    from inkling_probe.plugins import PluginInputError

    try:
        module = load_factory(factory)(ckpt, key, dtype)
    except PluginInputError as e:
        raise BadInput(str(e)) from None
    try:
        res = replay(module, ref_dump, key, step=step)
    except ProbeError as e:
        raise BadInput(str(e)) from None
    return res, res.to_dict(), lines(res)


def lines(res) -> list[str]:
    out = []
    for o in res.outputs:
        verdict = "DIVERGES" if o.diverged else "within tolerance"
        out.append(f"{o.key}: candidate module on the reference's inputs: rel_rms {fmt(o.metrics.rel_rms)} "
                   f"(threshold {fmt(o.threshold)}): {verdict}")
        out += [f"  {f.summary}" for f in o.findings]
    if res.layout is not None:
        out.append(f"  weight layout: {res.layout.summary}")
    out += [f"{k}: replayed, but the reference lacks it" for k in res.missing]
    return out


@click.command("replay")
@click.argument("ref", type=click.Path())
@click.argument("key")
@click.option("--ckpt", required=True, type=click.Path(), help="Candidate checkpoint dir.")
@click.option("--factory", default=None, help="MODULE:FUNCTION or a registered factory name (default: the one registered, inkling_model).")
@click.option("--dtype", "dtype_name", type=click.Choice(["fp32", "bf16"]), default=None,
              help="Candidate dtype (default: that of the recorded input).")
@click.option("--step", type=Whole(min=0), default=0, show_default=True, help="Step id.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(ref, key, ckpt, factory, dtype_name, step, as_json):
    """Run the candidate module KEY on REF's recorded inputs (KEY.in.*) and compare with REF's KEY.

    Exit 0 within tolerance, 1 when the module's own output diverges, 2 on bad input.
    """
    d = open_dump(ref)
    try:
        res, doc, text = run_replay(d, key, ckpt, factory, dtype_name, step)
    finally:
        d.close()
    if as_json:
        emit_json(doc)
    else:
        out = console()
        for line in text:
            out.print(line, markup=False)
    if res.diverged:
        raise SystemExit(1)

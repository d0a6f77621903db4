"""``inkling-probe report``: the bug-report folder (and its .zip) from two dumps or a saved compare.

    inkling-probe report REF CAND [--control R2] [--map FILE] -o DIR
    inkling-probe report SAVED.json -o DIR        (the output of ``compare --json``)
    inkling-probe report BISECT_DIR -o DIR        (a ``bisect layers`` work directory or its --json)

Exit status: 0 when the folder is written, 2 on bad input (one line naming it): a damaged or
crafted document, a ``--ckpt`` that is not the candidate's checkpoint, an ``OUT`` or ``OUT.zip``
that exists or is a symbolic link.
"""
from __future__ import annotations

import os

import click

from inkling_probe.cli.common import BadInput, open_dump


@click.command("report")
@click.argument("inputs", nargs=-1, required=True, metavar="REF CAND | SAVED.json | BISECT_DIR")
@click.option("-o", "--out", "out", required=True, type=click.Path(),
              help="Report folder to write (must not exist or be empty); OUT.zip is written beside it.")
@click.option("--control", type=click.Path(), default=None, help="Control dump: the noise floor (as for compare).")
@click.option("--map", "name_map", default=None, help="Name map for every dump's keys (TOML file or shipped name).")
@click.option("--threshold", type=float, default=None, help="As for compare: replaces the dtype default.")
@click.option("-k", "k", type=float, default=2.0, show_default=True, help="Allowed multiple of the control's floor.")
@click.option("--include", multiple=True, help="Only keys matching this glob (after --map); repeatable.")
@click.option("--ckpt", type=click.Path(), default=None,
              help="The candidate's checkpoint: also extract the standalone repro test_repro.py (see extract). "
                   "Refused when the candidate's dump recorded another checkpoint.")
def command(inputs, out, control, name_map, threshold, k, include, ckpt):
    """Write report.html, report.md, summary.json, the two plots, environment.json, slice.h5 and
    repro.sh into OUT (with --ckpt also test_repro.py), and OUT.zip. From two dumps (compared here),
    a saved ``compare --json``, or a ``bisect layers`` result (its decisive layer's dumps)."""
    from inkling_probe.bundle import write_report
    from inkling_probe.bundle.safe_write import check_folder, check_target
    from inkling_probe.errors import ProbeError

    if ckpt and not os.path.isdir(ckpt):
        raise BadInput(f"--ckpt {ckpt}: no such directory")
    try:
        check_target(check_folder(out, f"-o {out}") + ".zip", f"-o {out}: {out}.zip")
    except ProbeError as e:
        raise BadInput(str(e)) from None
    doc, dumps = _source(inputs, control, name_map, threshold, k, include)
    try:
        written = write_report(doc, out, dumps, name_map=name_map, ckpt=ckpt)
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    finally:
        for d in (dumps or {}).values():
            d.close()
    from inkling_probe.views.text import summary_lines

    for line in summary_lines(doc, limit=3):
        click.echo(line)
    for note in written.notes:
        click.echo(f"note: {note}")
    x = written.extracted
    if x is not None:
        state = "fails here with the candidate's settings" if x.fails_now else \
            "passes here with the candidate's settings (the bug does not show in the module alone)"
        click.echo(f"repro: test_repro.py, {x.kind} check of {x.key}: rel_rms {x.error:.4g} vs tolerance "
                   f"{x.tolerance:.4g}, {state}; repro.sh runs it")
    total = sum(written.files.values())
    click.echo(f"report: {os.path.join(out, 'report.html')} ({len(written.files)} files, {total / 1024:.0f} KiB); "
               f"zip: {written.zip} ({os.path.getsize(written.zip) / 1024:.0f} KiB)")


def _source(inputs, control, name_map, threshold, k, include):
    """(compare document, dumps or None to open those it names)."""
    from inkling_probe.bundle import sources
    from inkling_probe.errors import ProbeError

    paths = list(inputs)
    try:
        if len(paths) == 1 and os.path.isfile(paths[0]):
            doc = sources.load_json(paths[0])
            if sources.is_compare(doc):
                from inkling_probe.bundle import document

                return document.check(doc, paths[0]), None
        if len(paths) == 1:  # a bisect layers work directory or its --json output
            found = sources.bisect_dumps(paths[0])
            paths, control = [found["ref"], found["cand"]], control or found.get("control")
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    if len(paths) != 2:
        raise BadInput(f"expected REF CAND, a saved compare JSON or a bisect result, got {len(paths)} arguments")
    return _compare(paths, control, name_map, threshold, k, include)


def _compare(paths, control, name_map, threshold, k, include):
    from inkling_probe.compare import compare
    from inkling_probe.errors import ProbeError

    dumps = {"ref": open_dump(paths[0]), "cand": open_dump(paths[1])}
    if control:
        dumps["control"] = open_dump(control)
    try:
        report = compare(dumps["ref"], dumps["cand"], dumps.get("control"), name_map=name_map,
                         threshold=threshold, k=k, include=include or None)
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    return report.to_dict(), dumps

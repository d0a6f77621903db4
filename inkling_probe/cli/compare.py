"""``inkling-probe compare REF CAND``: where, and why, the candidate leaves the reference.

Exit status: 0 every row checked and within tolerance, 1 a divergence was found, 2 bad input (one
line naming it), 3 an unexpected error, 125 no divergence found but some rows could not be checked
(``report.unchecked``): neither an all-clear nor a divergence; the status ``git bisect run`` and
bisect's exit oracle read as "could not check" (inconclusive).
"""
from __future__ import annotations

import math

import click

from inkling_probe.bisect.oracle import INCONCLUSIVE_EXIT
from inkling_probe.cli.common import BadInput, Real, Whole, console, emit_json, open_dump, removed_option

METRICS = ("rel_rms", "cosine", "max_abs", "max_rel", "outside")


MAX_JOBS = 256  # worker processes; more than a machine has cores only queue (a huge N would fork N)


@click.command("compare")
@click.argument("ref", type=click.Path())
@click.argument("cand", type=click.Path())
@click.option("--control", type=click.Path(), default=None,
              help="A second reference differing from REF only in a benign factor (fp32 vs bf16, TP=1 vs "
                   "TP=2): its error per key is the noise floor.")
@click.option("--map", "name_map", default=None,
              help="Name map applied to every dump's keys: a TOML file or a shipped map's name.")
@click.option("--metric", type=click.Choice(METRICS), default="rel_rms", show_default=True,
              help="The error that decides divergence (cosine: 1 - cos).")
@click.option("--threshold", type=Real(min=0), default=None,
              help="Replaces the dtype default: a key diverges where error > max(THRESHOLD, K x floor).")
@click.option("-k", "k", type=Real(min=0, min_open=True), default=2.0, show_default=True, help="Allowed multiple of the control's floor.")
@click.option("--include", multiple=True, help="Only keys matching this glob (after --map); repeatable.")
@click.option("--step", "steps", type=Whole(min=0), multiple=True, help="Only this step; repeatable.")
@click.option("--all", "all_rows", is_flag=True, help="Table rows: every key (default: diverged keys and culprits).")
@removed_option("--diverged-only", "the default table (diverged keys and culprits; --all for every key)", is_flag=True)
@click.option("--no-explain", is_flag=True, help="Skip the hypotheses (explain) on the culprits.")
@click.option("--explain", "explain_keys", multiple=True, metavar="KEY",
              help="Also explain KEY (whatever its status); repeatable.")
@click.option("--decision", "decisions", multiple=True, metavar="GLOB",
              help="Keys that are routing decisions (top-k ids), besides those the dump or map declares.")
@click.option("--ref-row", type=Whole(min=0), default=None, help="REF ran a batch: compare its batch row N.")
@click.option("--cand-row", type=Whole(min=0), default=None, help="CAND ran a batch: compare its batch row N.")
@click.option("--confirm", is_flag=True,
              help="Replay each culprit that has recorded inputs with the candidate module (needs --ckpt).")
@click.option("--replay", "replay_key", default=None,
              help="Also run the candidate module KEY on REF's recorded inputs (needs --ckpt).")
@click.option("--ckpt", type=click.Path(), default=None, help="Candidate checkpoint dir for --replay.")
@click.option("--factory", default=None,
              help="MODULE:FUNCTION or registered name building the --replay module (default: the registered one).")
@click.option("--rows", "rows_kind", type=click.Choice(["text", "image", "audio"]), default=None,
              help="Judge one modality of a multimodal run: only its token rows (and its tower's keys), each "
                   "dump's own rows (docs/MULTIMODAL.md).")
@click.option("--jobs", "-j", type=Whole(min=1, max=MAX_JOBS), default=None,
              help="Worker processes reading and measuring keys ahead (default: the cores); same result for any N.")
@click.option("--cluster", default=None, metavar="ADDRESS", envvar="INKLING_PROBE_CLUSTER", show_envvar=True,
              help="Measure keys on this Dask cluster's workers (tcp://scheduler:8786) instead of --jobs; the dumps "
                   "at absolute paths every worker mounts. Needs inkling-probe[dask]; the scheduler must answer "
                   "within INKLING_PROBE_CLUSTER_TIMEOUT s (default 10). Same report as --jobs.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(ref, cand, control, name_map, metric, threshold, k, include, steps, all_rows, no_explain,
            explain_keys, decisions, ref_row, cand_row, confirm, replay_key, ckpt, factory, jobs, as_json,
            rows_kind=None, cluster=None):
    """Compare dump CAND against dump REF: the first divergence, the culprit and why.

    Keys align through --map, by step, call and token (the common tokens when the runs batched
    differently); TP dumps are reassembled. Exit 0 every row checked and within tolerance, 1 on
    divergence, 2 on bad input, 125 when no divergence was found but some rows could not be checked
    (inconclusive, as git bisect run's skip; the reason is printed).
    """
    from inkling_probe.compare import compare
    from inkling_probe.errors import ProbeError

    if metric == "max_abs" and threshold is None and control is None:
        raise BadInput("--metric max_abs has no dtype default: pass --threshold or --control")
    if (replay_key or confirm) and not ckpt:
        raise BadInput(f"{'--replay' if replay_key else '--confirm'} needs --ckpt (the candidate's checkpoint dir)")
    if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
        raise BadInput(f"--threshold {threshold}: must be a finite number >= 0")
    if cluster and rows_kind:
        raise BadInput("--cluster does not apply to --rows: a modality's view is read in this process")
    dumps = [open_dump(p) for p in (ref, cand)] + ([open_dump(control)] if control else [])
    for path, d in zip((ref, cand, control), dumps):
        if d.missing_segments:  # deleted segment files: their steps read as never recorded
            click.echo(f"note: {path}: segment files missing ({'; '.join(d.missing_segments)}); "
                       "their steps are absent from this comparison", err=True)
    try:
        from inkling_probe.compare import modality

        judged = [modality.view(d, rows_kind, dumps[1] if i != 1 else dumps[0]) for i, d in enumerate(dumps)] \
            if rows_kind else dumps
        with _progress(not as_json) as progress:
            report = compare(judged[0], judged[1], judged[2] if control else None, name_map=name_map, metric=metric,
                             threshold=threshold, k=k, include=include or None, steps=set(steps) or None,
                             explain=not no_explain, explain_keys=explain_keys, decisions=decisions,
                             ref_row=ref_row, cand_row=cand_row, progress=progress,
                             jobs=1 if rows_kind else jobs, cluster=cluster)  # a view is read in this process
        replayed = _replay(replay_key, ckpt, factory, dumps[0]) if replay_key else None
        confirmed = _confirm(report, ckpt, factory, dumps[0]) if confirm else None
        mm = modality.to_dict(report, dumps[0], dumps[1], rows_kind)
    except ProbeError as e:
        raise BadInput(str(e).splitlines()[0]) from None
    finally:
        for d in dumps:
            d.close()
    if as_json:
        doc = report.to_dict()
        if replayed is not None:
            doc["replay"] = replayed
        if confirmed is not None:
            doc["confirm"] = confirmed
        if mm is not None:
            doc["modality"] = {**mm, "judged_rows": rows_kind or "all"}
        emit_json(doc)
    else:
        from inkling_probe.views.terminal import render

        out = console()
        render(out, report, all_rows, replayed)
        for c in confirmed or []:
            out.print(f"  confirm {c['key']}: {c['verdict']}", markup=False)
        for line in (mm or {}).get("lines", []):
            out.print(line, markup=False)
        if rows_kind:
            out.print(f"judged: {rows_kind} rows only (--rows {rows_kind})", markup=False)
    # SystemExit, not ctx.exit: standalone_mode=False would turn Exit into a return value
    if report.diverged or (replayed is not None and replayed["diverged"]):
        raise SystemExit(1)
    if report.unchecked:
        raise SystemExit(INCONCLUSIVE_EXIT)


def _confirm(report, ckpt, factory, ref_dump) -> list[dict]:
    """Replay every culprit with recorded inputs: the candidate module on the reference's inputs."""
    from inkling_probe.cli.replay import run_replay

    out = []
    for c in report.culprits:
        try:
            res, doc, _ = run_replay(ref_dump, c.key, ckpt, factory, step=c.step)
        except click.ClickException as e:
            out.append({"key": c.key, "step": c.step, "confirmed": None, "verdict": f"not replayed: {e.message}"})
            continue
        ok = bool(doc.get("diverged"))  # REF's recorded inputs of the culprit, through the candidate module
        out.append({"key": c.key, "step": c.step, "confirmed": ok, "replay": doc,
                    "verdict": "confirmed: the candidate module alone diverges on the reference's inputs" if ok
                    else "NOT confirmed: the candidate module matches on the reference's inputs"})
    return out


def _replay(key, ckpt, factory, ref_dump) -> dict:
    from inkling_probe.cli.replay import run_replay

    _, doc, text = run_replay(ref_dump, key, ckpt, factory)
    return {**doc, "lines": text}


class _progress:
    """A transient rich progress bar on stderr (only on a terminal); yields the callback."""

    def __init__(self, enabled: bool):
        import sys

        self.enabled = enabled and sys.stderr.isatty()
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn("comparing"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task("", total=None)
        return lambda done, total, key: self.bar.update(task, completed=done, total=total, description=key)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

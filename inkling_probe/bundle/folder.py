"""The report folder: everything a person attaches to an issue, written into one folder and zipped.

    DIR/report.html  report.md  summary.json  divergence_by_layer.png  heatmap.png
        environment.json  slice.h5  repro.sh  repro.json      and DIR.zip beside DIR
        (with ckpt: test_repro.py, test_repro.json, test_repro.safetensors)

Built from the compare document (``Report.to_dict()`` or a saved ``compare --json``) and, for the
heatmap and the slice, the dumps it names (or those passed in). Paths inside are relative, the
dumps are named by their folder name only, and nothing is written outside DIR but DIR.zip. Every
file is created new (:mod:`.safe_write`): DIR and DIR.zip must not be links, and no file inside
is written through one. The document is checked first (:mod:`.document`), and a ``ckpt`` that is
not the candidate's (the identity its dump recorded, :mod:`.identity`) is refused before anything
is written.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field

from inkling_probe.bundle import document, environment, identity, repro
from inkling_probe.bundle.archive import zip_folder
from inkling_probe.bundle.safe_write import check_folder, check_target, inside, write_new
from inkling_probe.bundle.slice import write_slice
from inkling_probe.errors import ProbeError
from inkling_probe.views import html, markdown, plots
from inkling_probe.views.doc import as_doc, culprits, name
from inkling_probe.views.format import json_default, sanitize
from inkling_probe.views.tokens import token_errors

PLOTS = {"divergence_by_layer.png": "error per probe point in execution order (threshold, noise floor, culprits)",
         "heatmap.png": "token x layer error (per-token rel_rms of each layer's output)"}


@dataclass
class Written:
    folder: str
    zip: str = ""
    files: dict = field(default_factory=dict)  # name -> bytes
    notes: list = field(default_factory=list)
    extracted: object = None  # the Extracted test_repro.py, with ckpt


def write_report(report, out_dir, dumps: dict | None = None, name_map: str | None = None,
                 environ=None, ckpt: str | None = None) -> Written:
    """Write the report folder ``out_dir`` (must not exist or be empty) and ``out_dir.zip``.

    ``dumps``: {"ref"|"cand"|"control": Dump}; without them the dumps the document names are
    opened when they exist, else the heatmap and slice are left out (said in the notes).
    ``ckpt``: the candidate's checkpoint; with it the standalone repro test_repro.py is extracted
    for the first culprit too (:mod:`.extract`; imports torch)."""
    doc = document.check(as_doc(report), "the compare document")
    out_dir = check_folder(out_dir)
    check_target(out_dir + ".zip")
    notes: list = []
    opened = _open_named(doc, notes) if dumps is None else {}
    try:
        _check_checkpoint(ckpt, dumps if dumps is not None else opened)
    except BaseException:
        for d in opened.values():
            d.close()
        raise
    existed = os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    done = Written(out_dir, notes=notes)
    try:
        _fill(done, doc, dumps if dumps is not None else opened, name_map, environ, ckpt)
    except BaseException:  # no half-written report left behind: the next attempt can use the name
        shutil.rmtree(out_dir, ignore_errors=True)
        if existed:
            os.makedirs(out_dir)
        raise
    finally:
        for d in opened.values():
            d.close()
    done.zip = zip_folder(out_dir)
    return done


def _check_checkpoint(ckpt, dumps: dict) -> None:
    """Refuse a ckpt that is not the one the candidate's dump recorded (unrecorded: said in the repro)."""
    if not ckpt:
        return
    try:
        identity.check(ckpt, identity.recorded(dumps["cand"]) if "cand" in dumps else None)
    except identity.IdentityError as e:
        raise ProbeError(str(e)) from None


def _fill(done: Written, doc: dict, dumps: dict, name_map, environ, ckpt) -> None:
    summary = _portable(doc, dumps)
    _write(done, "summary.json", json.dumps(summary, indent=1, allow_nan=False))
    env = {**environment.collect(environ), "recorded": environment.recorded(dumps)}
    _write(done, "environment.json", json.dumps(env, indent=1))
    images = _plots(done, summary, dumps)
    slice_keys = _slice(done, summary, dumps)
    run = repro.run_record(summary, dumps)
    _write(done, "repro.json", json.dumps(run, indent=1, allow_nan=False) + "\n")
    if ckpt and slice_keys:
        done.extracted = _extract(done.folder, ckpt, done)
        if done.extracted.checkpoint == "not recorded":
            done.notes.append("--ckpt not checked against the candidate: its dump records no checkpoint identity "
                              f"({identity.ENV})")
    elif ckpt:
        done.notes.append("--ckpt given, but there is no culprit slice to extract a repro from")
    kind = done.extracted.kind if done.extracted is not None else False
    _write(done, "repro.sh", repro.script(summary, dumps, slice_keys, name_map, kind, run))
    os.chmod(os.path.join(done.folder, "repro.sh"), 0o755)
    listed = sorted(set(done.files) | {"report.md", "report.html"})
    _write(done, "report.md", markdown.markdown(summary, {PLOTS[f]: f for f in images}, listed))
    _write(done, "report.html", html.page(summary, {PLOTS[f]: data for f, data in images.items()}, env, listed))


def _plots(done: Written, summary: dict, dumps: dict) -> dict:
    images = {"divergence_by_layer.png": plots.png(plots.divergence_by_layer(summary))}
    if "ref" in dumps and "cand" in dumps:
        te = token_errors(summary, dumps["ref"], dumps["cand"])
        images["heatmap.png"] = plots.png(plots.heatmap(te, summary))
    else:
        done.notes.append("heatmap.png and slice.h5 need the dumps, which were not found")
    for file, data in images.items():
        _write(done, file, data)
    return images


def _slice(done: Written, summary: dict, dumps: dict) -> list[str]:
    if "ref" not in dumps or "cand" not in dumps:
        return []
    if not culprits(summary):
        done.notes.append("no culprit: no slice.h5")
        return []
    path = os.path.join(done.folder, "slice.h5")
    result = write_slice(summary, dumps, path)
    done.notes += [f"slice.h5 leaves out {x}" for x in result.left_out]
    if os.path.exists(path):
        done.files["slice.h5"] = os.path.getsize(path)
    return result.keys


def _extract(out_dir: str, ckpt: str, done: Written):
    from inkling_probe.bundle.extract import extract

    path = inside(out_dir, "test_repro.py")
    result = extract(out_dir, path, ckpt=ckpt)
    for file in (path, result.spec_file, result.data_file):
        file = os.path.basename(file)
        done.files[file] = os.path.getsize(os.path.join(out_dir, file))
    return result


def _write(done: Written, file: str, data) -> None:
    done.files[file] = write_new(inside(done.folder, file), data)


def _open_named(doc: dict, notes: list) -> dict:
    from inkling_probe.store.reader import open_dump

    out = {}
    for side in ("ref", "cand", "control"):
        path = doc.get(side)
        if not path:
            continue
        try:
            out[side] = open_dump(path)
        except ProbeError as e:
            notes.append(f"{side} dump not readable: {str(e).splitlines()[0]}")
    return out


def _portable(doc: dict, dumps: dict) -> dict:
    """The document with dump paths reduced to folder names and ``culprits`` always present."""
    forms = {}  # the same JSON as `compare --json` (views/format)
    for side in ("ref", "cand", "control"):
        for path in {doc.get(side), getattr(dumps.get(side), "path", None)} - {None, ""}:
            for form in {str(path), os.path.abspath(str(path))}:
                forms[form] = name(form)
    longest_first = sorted(forms, key=len, reverse=True)

    def short(value):  # every string of the document, wherever it is: structure, never text
        if isinstance(value, str):
            for form in longest_first:
                value = value.replace(form, forms[form])
            return value
        if isinstance(value, dict):
            return {short(k): short(v) for k, v in value.items()}
        if isinstance(value, list):
            return [short(v) for v in value]
        return value

    out = short(json.loads(json.dumps(sanitize(doc), default=json_default)))
    out.setdefault("culprits", culprits(out))
    return out

"""The report folder: everything a person attaches to an issue, written into one folder and zipped.

    DIR/report.html  report.md  summary.json  divergence_by_layer.png  heatmap.png
        environment.json  slice.h5  repro.sh            and DIR.zip beside DIR

Built from the compare document (``Report.to_dict()`` or a saved ``compare --json``) and, for the
heatmap and the slice, the dumps it names (or those passed in). Paths inside are relative, the
dumps are named by their folder name only, and nothing is written outside DIR but DIR.zip.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field

from inkling_probe.bundle import environment, repro
from inkling_probe.bundle.archive import zip_folder
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
    doc = as_doc(report)
    out_dir = os.path.normpath(os.fspath(out_dir))
    existed = os.path.isdir(out_dir)
    _prepare(out_dir)
    done = Written(out_dir)
    opened = _open_named(doc, done.notes) if dumps is None else {}
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


def _fill(done: Written, doc: dict, dumps: dict, name_map, environ, ckpt) -> None:
    summary = _portable(doc, dumps)
    _write(done, "summary.json", json.dumps(summary, indent=1, allow_nan=False))
    env = {**environment.collect(environ), "recorded": environment.recorded(dumps)}
    _write(done, "environment.json", json.dumps(env, indent=1))
    images = _plots(done, summary, dumps)
    slice_keys = _slice(done, summary, dumps)
    if ckpt and slice_keys:
        done.extracted = _extract(done.folder, ckpt, done)
    elif ckpt:
        done.notes.append("--ckpt given, but there is no culprit slice to extract a repro from")
    _write(done, "repro.sh", repro.script(summary, dumps, slice_keys, name_map, done.extracted is not None))
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

    path = os.path.join(out_dir, "test_repro.py")
    result = extract(out_dir, path, ckpt=ckpt)
    done.files["test_repro.py"] = os.path.getsize(path)
    return result


def _prepare(out_dir: str) -> None:
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ProbeError(f"{out_dir}: exists and is not an empty folder; choose a new one")
    if os.path.exists(out_dir + ".zip"):
        raise ProbeError(f"{out_dir}.zip: already exists; choose another folder name")
    os.makedirs(out_dir, exist_ok=True)


def _write(done: Written, file: str, data) -> None:
    path = os.path.join(done.folder, file)
    mode, data = ("wb", data) if isinstance(data, bytes) else ("w", data)
    with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as fh:
        fh.write(data)
    done.files[file] = os.path.getsize(path)


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
    text = json.dumps(sanitize(doc), default=json_default)  # the same JSON as `compare --json`
    for side in ("ref", "cand", "control"):
        for path in {doc.get(side), getattr(dumps.get(side), "path", None)} - {None, ""}:
            for form in {str(path), os.path.abspath(str(path))}:
                text = text.replace(json.dumps(form)[1:-1], name(form))
    out = json.loads(text)
    out.setdefault("culprits", culprits(out))
    return out

"""A standalone repro: a small pytest file that checks the culprit op alone, with no model run,
no checkpoint and no GPU (DESIGN.md part 6; ``inkling-probe extract``).

From a report folder (summary.json, slice.h5 and repro.json) and the culprit key:
- module check, when a plug-in of the ``inkling_probe.extract_factories`` group can rebuild the
  culprit module (``describe(ckpt, key)`` names the checkpoint tensors it loads; the test calls its
  ``build(config, key, tensors, dtype)``): the module is made from those tensors through the
  engine's own loader, with the settings the candidate ran with (repro.json), run on the
  reference's recorded inputs (``ref/KEY.in.*`` in the slice) and compared with the reference's
  recorded output. It fails while the bug is in the engine's code and passes once fixed.
- tensor-level check otherwise: the candidate's recorded output against the reference's (a record
  of the bug: it cannot pass after a fix, and its JSON says so).
Either way the tolerance is the one compare used for that key (its threshold).

Generated code is built from data by construction: ``FILE.py`` is the fixed template, copied as it
is; everything particular goes into ``FILE.json`` (values, serialised) and ``FILE.safetensors``
(tensors) beside it. With ``--ckpt``, a checkpoint that is not the one the candidate was recorded
from (repro.json's identity, :mod:`.identity`) is refused.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass

from inkling_probe.bundle import document, identity
from inkling_probe.bundle.environment import REDACTED
from inkling_probe.bundle.safe_write import check_target, open_new, write_new
from inkling_probe.errors import ProbeError
from inkling_probe.views.doc import culprits, findings, hypothesis, row_for

_TEMPLATE = os.path.join(os.path.dirname(__file__), "repro_template.py.txt")


KINDS = {
    "module": "the culprit module rebuilt from its checkpoint tensors through the engine's loader, with the "
              "candidate's settings, on the reference's recorded inputs, against the reference's recorded "
              "output: it fails while the bug is in the engine's code and passes once it is fixed",
    "tensor": "the candidate's recorded output against the reference's recorded output (both stored beside "
              "this test): a record of the bug, it fails as long as these two recorded tensors differ and cannot "
              "pass after a fix; to check a fix, record the candidate again and run `inkling-probe report`",
}


@dataclass
class Extracted:
    path: str
    key: str
    kind: str  # "module" | "tensor"
    why: str  # why this kind
    tolerance: float
    error: float | None = None  # the check's error as run here, just after writing
    data_file: str | None = None  # FILE.safetensors, beside the test
    spec_file: str | None = None  # FILE.json, beside the test
    checkpoint: str = ""  # "verified" | "not recorded" | "" (no --ckpt)

    @property
    def fails_now(self) -> bool:
        return self.error is not None and not self.error <= self.tolerance


def extract(report_dir: str, out: str, key: str | None = None, ckpt: str | None = None, factory=None,
            embed_mb: float = 4) -> Extracted:
    """Write the pytest file ``out`` (and ``out``'s .json and .safetensors beside it) for ``key``
    (default: the first culprit) and run its check once. ``embed_mb`` is kept for old callers: the
    tensors always go into the .safetensors file now."""
    doc, slice_path, run = _load(report_dir)
    out = check_target(out)
    stem = os.path.splitext(out)[0]
    targets = {"spec": check_target(stem + ".json"), "data": check_target(stem + ".safetensors")}
    verified = _check_checkpoint(ckpt, run)
    key, step = _culprit(doc, key)
    row = row_for(doc, key, step) or {}
    tolerance = float(row.get("threshold") or 0.0)
    tensors, inputs = _tensors(slice_path, key, step)
    plan, why = _module_plan(key, ckpt, factory, inputs)
    if plan is not None:
        tensors.update({"weight." + n: t.contiguous() for n, t in plan["tensors"].items()})
    kind = "module" if plan else "tensor"
    spec = _spec(doc, key, step, row, tolerance, plan, why, run, verified, str(tensors["cand.out"].dtype))
    try:
        write_new(targets["data"], _pack(tensors))
        write_new(targets["spec"], json.dumps(spec, indent=1, allow_nan=False) + "\n")
        with open(_TEMPLATE, "rb") as src, open_new(out) as dst:
            shutil.copyfileobj(src, dst)  # the same file for every repro: nothing in it comes from a dump
    except BaseException:
        for path in (out, *targets.values()):
            if os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)
        raise
    done = Extracted(out, key, kind, why, tolerance, data_file=os.path.basename(targets["data"]),
                     spec_file=os.path.basename(targets["spec"]), checkpoint=verified)
    done.error = _run_check(out)
    return done


def _load(report_dir: str) -> tuple[dict, str, dict]:
    """(summary.json's document, slice.h5's path, repro.json's candidate run or {})."""
    from inkling_probe.bundle.sources import load_json

    folder = os.path.dirname(report_dir) if report_dir.endswith(".h5") else report_dir
    summary, slice_path = os.path.join(folder, "summary.json"), os.path.join(folder, "slice.h5")
    for path in (summary, slice_path):
        if not os.path.isfile(path):
            raise ProbeError(f"{report_dir}: no {os.path.basename(path)} "
                             "(pass a folder written by `inkling-probe report`)")
    doc = document.check(load_json(summary), summary)
    repro = os.path.join(folder, "repro.json")
    run = load_json(repro) if os.path.isfile(repro) else {}
    _check_run(run, repro)
    return doc, slice_path, run


def _check_run(run: dict, where: str) -> None:
    values = (run.get("settings") or {}).get("values", {})
    if not isinstance(values, dict) or not all(isinstance(k, str) and (v is None or isinstance(v, str))
                                               for k, v in values.items()):
        raise ProbeError(f"{where}: settings.values is not an object of names to strings or null")
    if not isinstance(run.get("checkpoint"), (str, type(None))):
        raise ProbeError(f"{where}: checkpoint is not a string or null")


def _check_checkpoint(ckpt: str | None, run: dict) -> str:
    """"verified" (the identity the candidate recorded matches), "not recorded", or "" (no ckpt)."""
    if not ckpt:
        return ""
    try:
        identity.check(ckpt, run.get("checkpoint"))
    except identity.IdentityError as e:
        raise ProbeError(str(e)) from None
    return "verified" if run.get("checkpoint") else "not recorded"


def _tensors(slice_path: str, key: str, step: int) -> tuple[dict, list[str]]:
    """The culprit's tensors from the slice (ref.out, cand.out, in.*) and the input keys."""
    from inkling_probe.store.reader import open_dump

    try:
        with open_dump(slice_path) as s:
            tensors = {"ref.out": _get(s, f"ref/{key}", step), "cand.out": _get(s, f"cand/{key}", step)}
            inputs = sorted((k for k in s.keys() if k.startswith(f"ref/{key}.in.")), key=_input_order)
            for k in inputs:
                tensors["in." + k[len(f"ref/{key}.in."):]] = s.tensor(k, step)
    except ProbeError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        why = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        raise ProbeError(f"{slice_path}: not readable ({why})") from None
    return tensors, inputs


def _culprit(doc: dict, key: str | None) -> tuple[str, int]:
    ranked = culprits(doc)
    if key is None:
        if not ranked:
            raise ProbeError("the report has no culprit: nothing to extract (pass --key)")
        return ranked[0]["key"], ranked[0].get("step", 0)
    for c in ranked:
        if c["key"] == key:
            return key, c.get("step", 0)
    row = next((r for r in doc.get("rows") or [] if r["key"] == key), None)
    if row is None:
        raise ProbeError(f"--key {key!r}: not a compared key of this report")
    return key, row.get("step", 0)


def _get(s, key: str, step: int):
    try:
        return s.tensor(key, step)
    except ProbeError:
        raise ProbeError(f"slice.h5 has no {key!r} step {step}: extract needs the culprit's tensors") from None


def _input_order(k: str):
    tail = k.rsplit(".in.", 1)[1]
    return (0, int(tail), "") if tail.isdigit() else (1, 0, tail)


def _module_plan(key, ckpt, factory, inputs) -> tuple[dict | None, str]:
    """The plug-in's description of the culprit module, or None and the reason."""
    if not inputs:
        return None, f"the slice holds no recorded inputs of {key} (ref/{key}.in.*: record the reference with inputs)"
    if not ckpt:
        return None, "no --ckpt: the module's weights are not at hand"
    from inkling_probe.plugins import EXTRACT_FACTORIES, load, registered

    if factory is None and not registered(EXTRACT_FACTORIES):
        return None, f"no plug-in in {EXTRACT_FACTORIES} rebuilds modules"
    plan = load(EXTRACT_FACTORIES, factory, "--factory")(ckpt, key)
    if plan is None:
        return None, f"{key} cannot be rebuilt standalone by the registered plug-in"
    return plan, f"{key} rebuilt by {plan['build']} from {len(plan['tensors'])} checkpoint tensors"


def _pack(tensors: dict) -> bytes:
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in tensors.items()})


def _spec(doc, key, step, row, tolerance, plan, why, run, verified, dtype) -> dict:
    """FILE.json: everything particular to this repro, as data."""
    kind = "module" if plan else "tensor"
    values = (run.get("settings") or {}).get("values") or {}
    settings = {k: v for k, v in values.items() if v is None or REDACTED not in v}  # redacted: the shell's own
    return {
        "key": key, "step": step, "kind": kind, "checks": KINDS[kind], "why": why,
        "expect": "fails while the bug is there; passes once it is fixed" if plan else
                  "fails as long as the recorded tensors differ (always, for this bundle)",
        "tolerance": tolerance, "recorded_error": row.get("error"), "metric": doc.get("metric", "rel_rms"),
        "compared": {s: doc.get(s) for s in ("ref", "cand", "control") if doc.get(s)},
        "findings": [f"{hypothesis(f)} {label}: {f.get('summary', '')}" for label, f in findings(doc, key, step)],
        "settings": settings,
        "checkpoint": {"recorded": run.get("checkpoint"), "given": verified or None},
        "build": plan["build"] if plan else None, "config": plan["config"] if plan else None,
        "dtype": dtype.replace("torch.", ""),
    }


def _run_check(path: str) -> float | None:
    """The written file's ``error()``, imported from the file itself (what pytest will run)."""
    spec = importlib.util.spec_from_file_location("_inkling_repro", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.error())

"""A standalone repro: a small pytest file that checks the culprit op alone, with no model run,
no checkpoint and no GPU (DESIGN.md part 6; ``inkling-probe extract``).

From a report folder (summary.json + slice.h5) and the culprit key:
- module check, when a plug-in of the ``inkling_probe.extract_factories`` group can rebuild the
  culprit module (``describe(ckpt, key)`` names the checkpoint tensors it loads; the test calls its
  ``build(config, key, tensors, dtype)``): the module is made from those tensors through the
  engine's own loader, run on the reference's recorded inputs (``ref/KEY.in.*`` in the slice) and
  compared with the reference's recorded output. It fails while the bug is in the engine's code and
  passes once fixed.
- tensor-level check otherwise: the candidate's recorded output against the reference's.
Either way the tolerance is the one compare used for that key (its threshold). The tensors go into
the file (zlib + base64 safetensors) up to ``embed_mb``, else into a ``.safetensors`` beside it.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import os
import pprint
import re
import zlib
from dataclasses import dataclass

from inkling_probe.errors import ProbeError
from inkling_probe.views.doc import culprits, findings, hypothesis, row_for

_TEMPLATE = os.path.join(os.path.dirname(__file__), "repro_template.py.txt")


@dataclass
class Extracted:
    path: str
    key: str
    kind: str  # "module" | "tensor"
    why: str  # why this kind
    tolerance: float
    error: float | None = None  # the check's error as run here, just after writing
    data_file: str | None = None

    @property
    def fails_now(self) -> bool:
        return self.error is not None and not self.error <= self.tolerance


def extract(report_dir: str, out: str, key: str | None = None, ckpt: str | None = None, factory=None,
            embed_mb: float = 4) -> Extracted:
    """Write the pytest file ``out`` for ``key`` (default: the first culprit) and run its check once."""
    from inkling_probe.store.reader import open_dump

    doc, slice_path = _load(report_dir)
    key, step = _culprit(doc, key)
    row = row_for(doc, key, step) or {}
    tolerance = float(row.get("threshold") or 0.0)
    with open_dump(slice_path) as s:
        tensors = {"ref.out": _get(s, f"ref/{key}", step), "cand.out": _get(s, f"cand/{key}", step)}
        inputs = sorted((k for k in s.keys() if k.startswith(f"ref/{key}.in.")), key=_input_order)
        for k in inputs:
            tensors["in." + k[len(f"ref/{key}.in."):]] = s.tensor(k, step)
    plan, why = _module_plan(key, ckpt, factory, inputs)
    if plan is not None:
        tensors.update({"weight." + n: t.contiguous() for n, t in plan["tensors"].items()})
    payload = _pack(tensors)
    data_file = None
    if len(payload) > embed_mb * (1 << 20):
        data_file = os.path.splitext(os.path.basename(out))[0] + ".safetensors"
        with open(os.path.join(os.path.dirname(os.path.abspath(out)), data_file), "wb") as fh:
            fh.write(payload)
    text = _render(doc, key, step, row, tolerance, plan, why, payload, data_file, str(tensors["cand.out"].dtype))
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    done = Extracted(out, key, "module" if plan else "tensor", why, tolerance, data_file=data_file)
    done.error = _run_check(out)
    return done


def _load(report_dir: str) -> tuple[dict, str]:
    folder = os.path.dirname(report_dir) if report_dir.endswith(".h5") else report_dir
    summary, slice_path = os.path.join(folder, "summary.json"), os.path.join(folder, "slice.h5")
    for path in (summary, slice_path):
        if not os.path.isfile(path):
            raise ProbeError(f"{report_dir}: no {os.path.basename(path)} (pass a folder written by `inkling-probe report`)")
    with open(summary, encoding="utf-8") as fh:
        return json.load(fh), slice_path


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


def _render(doc, key, step, row, tolerance, plan, why, payload, data_file, dtype) -> str:
    found = [f"#   {hypothesis(f)} {label}: {f.get('summary', '')}" for label, f in findings(doc, key, step)]
    names = {"ref": doc.get("ref"), "cand": doc.get("cand"), "control": doc.get("control")}
    fields = {
        "KEY": key, "STEP": str(step), "TOLERANCE": repr(tolerance), "METRIC_ERROR": repr(row.get("error")),
        "SOURCES": ", ".join(f"{s} {n}" for s, n in names.items() if n), "WHY": why,
        "FINDINGS": "\n".join(found) or "#   (none)", "KIND": "module" if plan else "tensor",
        "BUILD": plan["build"] if plan else "", "CONFIG": pprint.pformat(plan["config"], width=110, compact=True, sort_dicts=False) if plan else "None",
        "DTYPE": dtype.replace("torch.", ""), "TEST_NAME": re.sub(r"\W", "_", key),
        "DATA": "None" if data_file else _wrapped(base64.b64encode(zlib.compress(payload, 9)).decode()),
        "DATA_FILE": repr(data_file),
    }
    with open(_TEMPLATE, encoding="utf-8") as fh:
        text = fh.read()
    return re.sub(r"@@(\w+)@@", lambda m: fields[m[1]], text)


def _wrapped(text: str, width: int = 100) -> str:
    """A long string literal as implicitly joined lines in parentheses."""
    lines = "\n".join(f'    "{text[i:i + width]}"' for i in range(0, len(text), width))
    return f"(\n{lines}\n)"


def _run_check(path: str) -> float | None:
    """The written file's ``error()``, imported from the file itself (what pytest will run)."""
    spec = importlib.util.spec_from_file_location("_inkling_repro", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.error())

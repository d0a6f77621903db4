"""The shape a compare document must have before a report or an extract reads it.

A saved ``compare --json`` or a report's ``summary.json`` comes from disk and may be damaged or
crafted; every field the views and the bundle read is checked here first, so a bad one is one
line naming the file and the field (exit 2), never a traceback half-way through the writing.
"""
from __future__ import annotations

import math

from inkling_probe.errors import ProbeError

_NUMBERS = ("error", "threshold", "floor", "score", "jump")  # the fields the views and the bundle read
_TEXTS = ("against", "ref_key", "cand_key", "status", "note", "ref_dtype", "cand_dtype")


def check(doc, where: str) -> dict:
    """``doc`` itself when it has the compare document's shape; else :class:`ProbeError`."""
    if not isinstance(doc, dict):
        raise ProbeError(f"{where}: not a JSON object")
    for side in ("ref", "cand", "control"):
        _text(doc.get(side), f"{where}: {side}")
    if "metric" in doc and not isinstance(doc["metric"], str):
        raise ProbeError(f"{where}: metric is not a string")
    if not isinstance(doc.get("rows"), list):
        raise ProbeError(f"{where}: rows is not a list")
    for field in ("rows", "control_rows", "culprits"):
        for i, r in enumerate(_list(doc.get(field), f"{where}: {field}")):
            _row(r, f"{where}: {field}[{i}]", step_needed=field == "culprits")
    for field in ("culprit", "first_divergence"):
        if doc.get(field) is not None:
            _row(doc[field], f"{where}: {field}", step_needed=True)
    for i, e in enumerate(_list(doc.get("explanations"), f"{where}: explanations")):
        _explanation(e, f"{where}: explanations[{i}]")
    for i, c in enumerate(doc.get("culprits") or []):
        for j, e in enumerate(_list(c.get("explanations"), f"{where}: culprits[{i}].explanations")):
            _explanation(e, f"{where}: culprits[{i}].explanations[{j}]")
    for i, n in enumerate(_list(doc.get("notes"), f"{where}: notes")):
        _text(n, f"{where}: notes[{i}]")
    return doc


def _list(value, label: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProbeError(f"{label}: not a list")
    return value


def _text(value, label: str) -> None:
    if value is not None and not isinstance(value, str):
        raise ProbeError(f"{label}: not a string ({type(value).__name__})")


def _number(value, label: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ProbeError(f"{label}: not a number ({type(value).__name__})")


def _count(value, label: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ProbeError(f"{label}: not a count ({value!r:.40})")


def _row(r, label: str, step_needed: bool = False) -> None:
    if not isinstance(r, dict):
        raise ProbeError(f"{label}: not an object")
    if not isinstance(r.get("key"), str) or not r["key"]:
        raise ProbeError(f"{label}: key is not a non-empty string")
    if step_needed and r.get("step") is None:
        raise ProbeError(f"{label}: no step")
    for field in ("step", "call", "layer"):
        _count(r.get(field), f"{label}.{field}")
    for field in _NUMBERS:
        _number(r.get(field), f"{label}.{field}")
    for field in _TEXTS:
        _text(r.get(field), f"{label}.{field}")
    metrics = r.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise ProbeError(f"{label}.metrics: not an object")
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isnan(v):
                continue
            if not isinstance(v, (list, dict, str)):
                _number(v, f"{label}.metrics.{k}")
    shape = r.get("shape")
    if shape is not None and (not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool)
                                                                       for n in shape)):
        raise ProbeError(f"{label}.shape: not a list of integers")


def _explanation(e, label: str) -> None:
    if not isinstance(e, dict):
        raise ProbeError(f"{label}: not an object")
    if "key" in e and not isinstance(e["key"], str):
        raise ProbeError(f"{label}.key: not a string")
    for i, f in enumerate(_list(e.get("findings"), f"{label}.findings")):
        if not isinstance(f, dict):
            raise ProbeError(f"{label}.findings[{i}]: not an object")
        for field in ("summary", "hypothesis", "name", "kind"):
            _text(f.get(field), f"{label}.findings[{i}].{field}")

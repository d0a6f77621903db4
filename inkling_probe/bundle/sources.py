"""Where a report's dumps come from besides two paths: a saved ``compare --json`` (the document
itself) or a ``bisect layers`` result (its work directory or its ``--json`` output), whose decisive
layer was recorded by the bisect's last failing runs (``bad/NNN-ref-layers.K/dump``, ...).
"""
from __future__ import annotations

import glob
import json
import os
import re

from inkling_probe.errors import ProbeError

SIDES = ("ref", "cand", "control")
_LAYER = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")  # a layer's name: no folder, no glob


def load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ProbeError(f"{path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProbeError(f"{path}: not JSON ({str(e).splitlines()[0][:60]})") from None
    if not isinstance(doc, dict):
        raise ProbeError(f"{path}: JSON, but not an object")
    return doc


def is_compare(doc: dict) -> bool:
    return "rows" in doc and "ref" in doc


def bisect_dumps(path: str) -> dict[str, str]:
    """{side: dump path} of the layer a ``bisect layers`` run found, from its work directory (with
    state.json) or its ``--json`` output."""
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "state.json")):
            raise ProbeError(f"{path}: a folder without state.json; pass REF CAND (two dumps), a saved "
                             "compare JSON or a bisect work directory")
        workdir, doc = path, load_json(os.path.join(path, "state.json"))
    else:
        doc = load_json(path)
        workdir = doc.get("workdir") or os.path.dirname(path)
    if "kind" not in doc:
        raise ProbeError(f"{path}: JSON, but neither a compare result (compare --json) nor a bisect result")
    if doc.get("kind") != "layers":
        kind = str(doc.get("kind"))[:40]
        raise ProbeError(f"{path}: a report reads `bisect layers` results; this is bisect {kind!r}")
    if not isinstance(workdir, str):
        raise ProbeError(f"{path}: workdir is not a string")
    answer = doc.get("answer") or {}
    if not isinstance(answer, dict):
        raise ProbeError(f"{path}: answer is not an object")
    layer = answer.get("layer")
    if not layer:
        raise ProbeError(f"{path}: the bisect found no divergent layer (or has not finished): nothing to report")
    if not isinstance(layer, str) or not _LAYER.match(layer):
        raise ProbeError(f"{path}: answer.layer {str(layer)[:40]!r} is not a layer name")
    found = {}
    for side in SIDES:
        hits = sorted(glob.glob(os.path.join(workdir, "*", f"*-{side}-{layer}", "dump")))
        if hits:
            found[side] = hits[-1]
    if "ref" not in found or "cand" not in found:
        raise ProbeError(f"{workdir}: no ref and cand dumps of {layer} (looked for */NNN-SIDE-{layer}/dump)")
    return found

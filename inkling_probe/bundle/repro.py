"""repro.sh: how to look at the attached slice, re-run the comparison and re-record the dumps.

Everything in it is relative to the report folder or to ``$WORK`` (the folder that held the
dumps): absolute paths in the recorded command lines become ``$WORK/<name>``, and values that look
like secrets are redacted the way environment.json redacts them.
"""
from __future__ import annotations

import os
import shlex

from inkling_probe.bundle.environment import redact
from inkling_probe.views.doc import culprits, name


def portable(arg: str) -> str:
    """One command-line word with an absolute path turned into ``$WORK/<last part>``."""
    arg = redact("", arg)
    if os.path.isabs(arg):
        return f'"$WORK/{os.path.basename(os.path.normpath(arg))}"'
    if "=" in arg and os.path.isabs(arg.partition("=")[2]):
        k, _, v = arg.partition("=")
        return f'{k}="$WORK/{os.path.basename(os.path.normpath(v))}"'
    return shlex.quote(arg)


def script(doc: dict, dumps: dict, slice_keys: list[str], name_map: str | None = None,
           has_test: bool = False) -> str:
    sides = {s: name(d.path) for s, d in dumps.items()}
    lines = ["#!/bin/sh", "# Reproduce this inkling-probe report (run from anywhere; paths are relative).",
             "set -eu", 'cd "$(dirname "$0")"', ""]
    if slice_keys:
        lines += ["# the tensors around each culprit, attached in slice.h5 (a dump: ls/show read it)",
                  "inkling-probe ls slice.h5"]
        for c in culprits(doc)[:3]:
            for side in ("ref", "cand"):
                if f"{side}/{c['key']}" in slice_keys:
                    lines.append(f"inkling-probe show slice.h5 {shlex.quote(side + '/' + c['key'])} --step {c.get('step', 0)}")
        lines.append("")
    if has_test:
        lines += ["# the standalone check (no model run, no checkpoint): fails while the bug is there",
                  "python -m pytest -q test_repro.py || echo \"test_repro.py fails: the bug is there\"", ""]
    names = " ".join(f"{s}={n}" for s, n in sides.items()) or "ref=... cand=..."
    compare = ['inkling-probe compare "$WORK/{}" "$WORK/{}"'.format(sides.get("ref", name(doc.get("ref"))),
                                                                    sides.get("cand", name(doc.get("cand"))))]
    if doc.get("control"):
        compare.append(f'--control "$WORK/{sides.get("control", name(doc["control"]))}"')
    if name_map:
        compare.append(f"--map {portable(name_map)}")
    lines += [f"# the comparison, given the dumps ({names}) in $WORK",
              'if [ -n "${WORK:-}" ]; then', "  " + " ".join(compare) + " --diverged-only || true", "fi", ""]
    recorded = [(s, d.segments[0].run.get("argv")) for s, d in dumps.items() if d.segments and d.segments[0].run.get("argv")]
    if recorded:
        lines.append("# how each dump was recorded (the command lines saved in the dumps)")
        lines += [f"#   {s}: " + " ".join([os.path.basename(argv[0])] + [portable(a) for a in argv[1:]])
                  for s, argv in recorded]
    return "\n".join(lines) + "\n"

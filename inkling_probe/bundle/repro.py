"""repro.sh and repro.json: how to reproduce the report, in a clean shell.

repro.sh sets every variable that changes the computation to the value the candidate ran with
(:mod:`.registry`; unset ones unset), shows the attached slice, re-runs the comparison given
``$WORK`` (the folder that held the dumps), lists how each dump was recorded, and ends with the
standalone check test_repro.py when the report has one: its exit status is the script's (1 while
the bug is there, 0 once fixed). The header says what it expects. It runs under a bare ``env -i``:
every command is the recorded interpreter's (``"$PY" -m inkling_probe.cli``, ``"$PY" -m pytest``, the
absolute path repro.json keeps), its folder goes first on ``PATH``, and when that interpreter is gone
the script says so in one line and exits 2.

Built from data by construction: every word that comes from a dump, a saved document or a recorded
command line is ``shlex.quote``d; absolute paths become ``"$WORK"/<quoted last part>``; recorded
arguments holding newlines or other control characters are shown in comments encoded
(``$'a\\nb'``), never raw, and setting values holding them are left to repro.json; values that look
like secrets are redacted the way environment.json redacts them. :func:`check_script` verifies the
result line by line before it is written.
"""
from __future__ import annotations

import os
import re
import shlex
import sys

from inkling_probe.bundle.environment import REDACTED, redact
from inkling_probe.errors import ProbeError
from inkling_probe.views.doc import culprits, name

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROBE = '"$PY" -m inkling_probe.cli'
PYTEST = '"$PY" -m pytest -q -p no:cacheprovider test_repro.py'
GONE = 2  # the exit status when the recorded interpreter is gone


def encoded(arg: str) -> str:
    """One word for a comment line: ``shlex.quote``d, or ``$'...'`` with control characters escaped."""
    if not _CONTROL.search(arg):
        return shlex.quote(arg)
    body = arg.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + _CONTROL.sub(lambda m: _escape(m[0]), body) + "'"


def _escape(ch: str) -> str:
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return named.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}")


def portable(arg: str, comment: bool = False) -> str:
    """One command-line word, quoted, with an absolute path turned into ``"$WORK"/<last part>``."""
    arg = redact("", str(arg))
    word = encoded if comment else _quote
    if os.path.isabs(arg):
        return '"$WORK"/' + word(os.path.basename(os.path.normpath(arg)))
    k, eq, v = arg.partition("=")
    if eq and os.path.isabs(v):
        return word(k + "=") + '"$WORK"/' + word(os.path.basename(os.path.normpath(v)))
    return word(arg)


def _quote(arg: str) -> str:
    if _CONTROL.search(arg):
        raise ProbeError(f"{arg[:40]!r}...: a control character (a newline?) in a word repro.sh would run")
    return shlex.quote(arg)


def script(doc: dict, dumps: dict, slice_keys: list[str], name_map: str | None = None,
           has_test: bool | str = False, run: dict | None = None) -> str:
    """The text of repro.sh. ``has_test``: the kind of test_repro.py ("module" or "tensor"; True is
    read as "module"), False without one. ``run``: repro.json's document (:func:`run_record`)."""
    run = run or {}
    lines = ["#!/bin/sh", "# Reproduce this inkling-probe report (run from anywhere; paths are relative)."]
    lines += _expectation(doc, has_test)
    lines += ["set -eu", 'cd "$(dirname "$0")"', ""]
    lines += _interpreter(run.get("python") or sys.executable)
    lines += _settings(run)
    if slice_keys:
        lines += ["# the tensors around each culprit, attached in slice.h5 (a dump: ls/show read it)",
                  f"{PROBE} ls slice.h5"]
        for c in culprits(doc)[:3]:
            for side in ("ref", "cand"):
                if f"{side}/{c['key']}" in slice_keys:
                    step = int(c.get("step", 0))
                    lines.append(f"{PROBE} show slice.h5 {_quote(side + '/' + c['key'])} --step {step}")
        lines.append("")
    lines += _compare(doc, dumps, name_map)
    lines += _recorded(dumps)
    if has_test:
        lines += ["# the standalone check (no model run, no checkpoint; test_repro.json says what it checks):",
                  "# its exit status is this script's", f"exec {PYTEST}"]
    text = "\n".join(lines) + "\n"
    check_script(text)
    return text


def _interpreter(python: str) -> list[str]:
    """``PY``: the recorded interpreter, checked (exit 2, one line, when it is gone) and first on PATH."""
    return ["# the Python that wrote this report (inkling-probe is installed in it); the script needs nothing",
            "# else from the shell it runs in (env -i is enough)",
            f"PY={_quote(python)}",
            'if [ ! -x "$PY" ]; then',
            f'  echo "repro.sh: the recorded interpreter $PY is gone: edit PY= in repro.sh to a Python with '
            f'inkling-probe installed" >&2',
            f"  exit {GONE}", "fi",
            'PATH="${PY%/*}:${PATH:-/usr/bin:/bin}"', "export PATH", ""]


def _expectation(doc: dict, has_test) -> list[str]:
    if has_test == "tensor":
        return ["# Expected: exit 1. test_repro.py compares the two recorded tensors attached with it: it fails as",
                "# long as they differ and cannot pass after a fix (record the candidate again and re-run report)."]
    if has_test:
        return ["# Expected: exit 1 while the bug is there (test_repro.py fails), exit 0 once it is fixed."]
    return ["# Expected: with WORK set, the comparison exits 1 while the bug is there (printed, not this",
            "# script's status); without test_repro.py (report --ckpt) nothing here re-runs the culprit alone."]


def _settings(run: dict) -> list[str]:
    s = run.get("settings") or {}
    values = s.get("values") or {}
    cand = run.get("candidate") or "the candidate"
    if not s.get("recorded"):
        return [f"# {_comment(cand)} recorded no environment: the settings that change the computation are not",
                "# known (repro.json); they are left as this shell has them", ""]
    out = [f"# the settings that change the computation, as {_comment(cand)} ran with them (repro.json says",
           "# why each matters; test_repro.py applies them too); those it ran without are unset"]
    unset = []
    for var, value in values.items():
        if not _VAR.match(var):
            continue
        if value is None:
            unset.append(var)
        elif _CONTROL.search(value) or REDACTED in value:
            out.append(f"# {var}: its value holds a control character or was redacted; see repro.json")
        else:
            out.append(f"export {var}={shlex.quote(value)}")
    for i in range(0, len(unset), 4):
        out.append("unset " + " ".join(unset[i:i + 4]))
    missing = s.get("not_recorded") or []
    if missing:
        names = " ".join(m for m in missing if _VAR.match(m))
        out.append(f"# not recorded by the dump, left as this shell has them: {names}")
    return out + [""]


def _compare(doc: dict, dumps: dict, name_map: str | None) -> list[str]:
    sides = {s: name(d.path) for s, d in dumps.items()}
    for s in ("ref", "cand", "control"):
        if s not in sides and doc.get(s):
            sides[s] = name(doc[s])
    words = [PROBE, "compare"] + ['"$WORK"/' + _quote(sides.get(s, "-")) for s in ("ref", "cand")]
    if doc.get("control"):
        words += ["--control", '"$WORK"/' + _quote(sides.get("control", "-"))]
    if name_map:
        words += ["--map", portable(name_map)]
    names = " ".join(f"{s}={encoded(n)}" for s, n in sides.items()) or "ref=... cand=..."
    return [f"# the comparison, given the dumps ({names}) in $WORK: exit 1 = diverged",
            'if [ -n "${WORK:-}" ]; then', "  " + " ".join(words) + ' || echo "compare exited $?"', "fi", ""]


def _recorded(dumps: dict) -> list[str]:
    recorded = []
    for s, d in dumps.items():
        argv = d.segments[0].run.get("argv") if d.segments else None
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            recorded.append((s, argv))
    if not recorded:
        return []
    out = ["# how each dump was recorded (the command lines saved in the dumps; control characters escaped)"]
    out += [f"#   {s}: " + " ".join([encoded(_program(argv[0]))] + [portable(a, comment=True) for a in argv[1:]])
            for s, argv in recorded]
    return out + [""]


def _program(argv0: str) -> str:
    """The recorded program's name: ``inkling-probe`` for ``python -m inkling_probe.cli``."""
    parts = os.path.normpath(argv0).split(os.sep)
    return "inkling-probe" if parts[-3:] == ["inkling_probe", "cli", "__main__.py"] else os.path.basename(argv0)


def _comment(text: str) -> str:
    return _CONTROL.sub(lambda m: _escape(m[0]), str(text))


def check_script(text: str) -> None:
    """Refuse a script with a control character other than the line ends, or a comment that would
    not stay one: a guard behind the quoting above, so a slip is an error, never a command."""
    for n, line in enumerate(text.split("\n"), 1):
        if _CONTROL.search(line):
            raise ProbeError(f"repro.sh line {n}: a control character; refusing to write it")


def run_record(doc: dict, dumps: dict) -> dict:
    """repro.json: the candidate's settings (:mod:`.registry`) and checkpoint identity (:mod:`.identity`)."""
    from inkling_probe.bundle import identity, registry

    cand = dumps.get("cand")
    settings = registry.of_dump(cand) if cand is not None else registry.settings(None)
    values = {k: (None if v is None else redact(k, v)) for k, v in settings["values"].items()}
    return {"candidate": name(getattr(cand, "path", None) or doc.get("cand")),
            "python": sys.executable,  # repro.sh runs everything with it
            "checkpoint": identity.recorded(cand) if cand is not None else None,
            "settings": {**settings, "values": values}}


EXPECT = {"module": "repro.sh exits 1 while the bug is there and 0 once it is fixed (test_repro.py's module check, "
                    "run with the candidate's settings)",
          "tensor": "repro.sh exits 1: test_repro.py compares two recorded tensors and cannot pass after a fix",
          "": "no test_repro.py (report --ckpt writes one); repro.sh shows the slice and, with WORK set, re-runs "
              "the comparison (exit 1 = diverged)"}

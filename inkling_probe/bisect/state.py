"""The state file of one bisect: its arguments, every run, every verdict, the answer.

A bisect keeps everything in its work directory; ``state.json`` is rewritten atomically after each
run, so a bisect killed at any point resumes from it: the search is deterministic, so it asks again
for the same runs in the same order and the finished ones are answered from here, not redone.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from inkling_probe.errors import ProbeError

VERSION = 1
FILE = "state.json"


class StateMismatch(ProbeError):
    """The work directory holds a bisect with other arguments."""


class State:
    """Runs (by key), verdicts (by key) and the answer of the bisect in ``workdir``."""

    def __init__(self, workdir, kind: str, args: dict):
        self.workdir = Path(workdir)
        self.path = self.workdir / FILE
        self.kind, self.args = kind, _plain(args)
        self.runs: list[dict] = []
        self.verdicts: dict[str, dict] = {}
        self.answer: dict | None = None
        if self.path.exists():
            self._load()
        else:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.save()

    @property
    def resumed_runs(self) -> int:
        return sum(1 for r in self.runs if r.get("resumed"))

    def run(self, key: str) -> dict | None:
        """The finished run recorded under ``key``, if any."""
        return next((r for r in self.runs if r["key"] == key), None)

    def add_run(self, record: dict) -> None:
        self.runs.append(record)
        self.save()

    def set_verdict(self, key: str, verdict: dict) -> None:
        self.verdicts[key] = verdict
        self.save()

    def save(self) -> None:
        doc = {"version": VERSION, "kind": self.kind, "args": self.args, "runs": self.runs,
               "verdicts": self.verdicts, "answer": self.answer}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.path)

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError) as e:
            raise StateMismatch(f"{self.path}: unreadable state file ({e}); use a new --workdir") from None
        if doc.get("kind") != self.kind or doc.get("args") != self.args:
            changed = sorted(k for k in set(self.args) | set(doc.get("args", {}))
                             if self.args.get(k) != doc.get("args", {}).get(k))
            raise StateMismatch(f"{self.workdir} holds a bisect {doc.get('kind')} with other arguments "
                                f"({', '.join(changed) or 'kind'} differ); use a new --workdir")
        self.runs, self.verdicts = doc["runs"], doc["verdicts"]
        for r in self.runs:
            r["resumed"] = True


def _plain(args: dict) -> dict:
    """Arguments as JSON would give them back (tuples -> lists), so a reload compares equal."""
    return json.loads(json.dumps(args))

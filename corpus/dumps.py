"""Recorded dumps, one per distinct run, kept under one folder for the whole bench run."""
from __future__ import annotations

import os
from collections import defaultdict


class Dumps:
    """Paths of runs' dumps; :meth:`ensure` records the missing ones, family by family.

    A family's ``record_many(items)`` returns ``{run: error}`` for runs it could not record.
    """

    def __init__(self, root: str, families: dict, progress=None):
        self.root = root
        self.families = families
        self.progress = progress or (lambda msg: None)
        self.failed: dict = {}  # run -> error text

    def path(self, run) -> str:
        return os.path.join(self.root, run.slug())

    def ensure(self, runs) -> None:
        todo = defaultdict(list)
        for run in dict.fromkeys(runs):
            if run is not None and not os.path.isdir(self.path(run)) and run not in self.failed:
                todo[run.family].append((run, self.path(run)))
        for family, items in todo.items():
            self.progress(f"recording {len(items)} {family} runs")
            try:
                self.failed.update(self.families[family].record_many(items) or {})
            except Exception as e:  # one broken family must not hide the others' results
                for run, _ in items:
                    if not os.path.isdir(self.path(run)):
                        self.failed[run] = f"{type(e).__name__}: {e}"

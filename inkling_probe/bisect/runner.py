"""Runs one command of a bisect and keeps its artifacts; answers repeated runs from the state file.

Each run gets a folder: first ``pending/NNN-label/``, then, once its verdict is known,
``good/NNN-label/``, ``bad/NNN-label/`` or ``inconclusive/NNN-label/`` (could not be checked), holding
``command.txt`` (the command line and the variables set for it), ``output.txt`` (stdout and stderr), ``exit_code`` and ``dump/`` (when the
command records one). Commands run without a shell (``shlex`` splits them) unless ``shell=True``.
``{dump}`` in a command is replaced by the run's dump path; a command without it records through
``INKLING_PROBE``.

Each run is a process group of its own (:mod:`~inkling_probe.procs`), recorded in the state
while it runs. A runner first reaps the groups a killed bisect left (the state file's lock says no
live bisect owns them), and a run never reuses a folder that exists: a killed attempt's folder may
still be written by its orphan, so the redo takes ``pending/NNN-label.r2`` (filed under the usual
name). Every path is taken through :meth:`State.inside`: inside the work directory, through no link.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from inkling_probe import procs
from inkling_probe.errors import ProbeError

TAIL_CHARS = 2000
_ATTEMPT = re.compile(r"\.r\d+$")  # a redone run's pending folder, when a killed attempt left the first


class BudgetSpent(ProbeError):
    """The ``--max-runs`` budget is spent before the bisect finished (its state is kept)."""


class BadCommand(ProbeError):
    """A command that cannot be parsed or whose program does not exist."""


@dataclass(frozen=True)
class Command:
    """A command line as the user wrote it; ``shell`` runs it through ``/bin/sh -c``."""

    text: str
    shell: bool = False

    def check(self, what: str) -> None:
        """Raise :class:`BadCommand` (naming ``what``) for an empty, unparsable or missing program."""
        if self.shell:
            if not self.text.strip():
                raise BadCommand(f"{what}: empty command")
            return
        try:
            argv = shlex.split(self.text)
        except ValueError as e:
            raise BadCommand(f"{what} {self.text!r}: {e}") from None
        if not argv:
            raise BadCommand(f"{what}: empty command")
        if shutil.which(argv[0]) is None:
            raise BadCommand(f"{what}: program {argv[0]!r} not found (commands run without a shell; "
                             "pass --shell for shell syntax)")

    def records_into_arg(self) -> bool:
        return "{dump}" in self.text

    def args(self, dump: str):
        """What subprocess runs: an argv list, or the shell text (``{dump}`` replaced)."""
        if self.shell:
            return self.text.replace("{dump}", shlex.quote(dump))
        return [a.replace("{dump}", dump) for a in shlex.split(self.text)]


class Runner:
    """Executes runs for one bisect, at most ``max_runs`` of them, reporting to ``progress``."""

    def __init__(self, state, *, max_runs: int | None = None, timeout: float | None = None, progress=None):
        self.state, self.max_runs, self.timeout = state, max_runs, timeout
        self.progress = progress or (lambda event, info: None)
        self.seen: set[str] = set()  # keys reported in this session
        self.reap_stale()  # runs a killed bisect left behind (the state's lock: no live bisect owns them)

    def first_report(self, key: str) -> bool:
        """True the first time ``key`` is asked about in this session (repeats are not reported)."""
        new = key not in self.seen
        self.seen.add(key)
        return new

    def execute(self, key: str, label: str, command: Command, env: dict, record: bool = False) -> dict:
        """Run ``command`` with ``env`` set (None: unset), or return the finished run of ``key``."""
        done = self.state.run(key)
        if done is not None:
            if self.first_report(f"run:{key}"):
                self.progress("cached", done)
            return done
        if self.max_runs is not None and len(self.state.runs) >= self.max_runs:
            raise BudgetSpent(f"--max-runs {self.max_runs} spent ({len(self.state.runs)} runs, kept in "
                              f"{self.state.workdir}); run the same command with a larger --max-runs to continue")
        self.reap_stale()
        n = len(self.state.runs) + 1
        self.seen.add(f"run:{key}")
        folder = self._new_folder(n, label)
        self.progress("start", {"n": n, "label": label, "key": key})
        rel = f"pending/{folder.name}"

        token = procs.new_token()

        def started(pid: int) -> None:
            self.state.set_live([{**procs.identity(pid, token), "dir": rel, "key": key}])

        rec = _run(command, {**env, procs.MARK: token}, folder, record, self.timeout, started)
        rec["env"].pop(procs.MARK, None)
        rec.update(key=key, label=label, n=n)
        self.state.live = []
        self.state.add_run(rec)
        self.progress("done", rec)
        return rec

    def reap_stale(self) -> None:
        """Kill and wait for the process groups a killed bisect left running; remove their folders
        once nothing of them runs (a group that will not end keeps its folder: no run reuses it)."""
        if not self.state.live:
            return
        for ident in self.state.live:
            if procs.reap(ident):
                shutil.rmtree(self.state.inside(ident["dir"]), ignore_errors=True)
            else:
                self.progress("stale", ident)
        self.state.set_live([])

    def _new_folder(self, n: int, label: str) -> Path:
        """``pending/NNN-label``, or ``NNN-label.rK`` when a killed attempt left that folder."""
        pending = self.state.inside("pending")
        pending.mkdir(exist_ok=True)
        self.state.inside("pending")  # checked again: not a link
        base = f"{n:03d}-{_safe(label)}"
        for attempt in range(1, 1000):
            name = base if attempt == 1 else f"{base}.r{attempt}"
            try:
                (pending / name).mkdir()
            except FileExistsError:
                continue
            return pending / name
        raise ProbeError(f"{pending}: 999 folders for run {n}; clean up the work directory")

    def settle(self, runs: list[dict], side: str) -> None:
        """Move the runs' folders from pending/ to ``side``: good/, bad/ or inconclusive/ (once)."""
        assert side in ("good", "bad", "inconclusive"), side
        for rec in runs:
            if not rec["dir"].startswith("pending/"):
                continue
            src = self.state.inside(rec["dir"])
            dst_dir = self.state.inside(side)
            dst_dir.mkdir(exist_ok=True)
            name = _ATTEMPT.sub("", src.name)  # good/, bad/, inconclusive/ keep one layout: NNN-label
            dst = self.state.inside(f"{side}/{name}")
            shutil.rmtree(dst, ignore_errors=True)
            if src.exists():
                os.replace(src, dst)
            rec["dir"] = f"{side}/{name}"
            if rec.get("dump"):
                rec["dump"] = f"{rec['dir']}/dump"
        self.state.save()
        pending = self.state.workdir / "pending"
        if pending.is_dir() and not pending.is_symlink() and not any(pending.iterdir()):
            pending.rmdir()

    def path(self, rec: dict, field: str = "dump") -> str:
        """Absolute path of a run's dump (or folder)."""
        return str(self.state.inside(rec[field]))


def _env(overrides: dict) -> dict:
    env = dict(os.environ)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def _run(command: Command, overrides: dict, folder: Path, record: bool, timeout, on_start=None) -> dict:
    dump = str(folder / "dump")
    overrides = dict(overrides)
    if record and not command.records_into_arg():
        overrides["INKLING_PROBE"] = dump
    args = command.args(dump)
    shown = args if isinstance(args, str) else shlex.join(args)
    shown_env = {k: v for k, v in overrides.items() if k != procs.MARK}  # the run's token: not a setting
    sets = " ".join(f"{k}={shlex.quote(v)}" if v is not None else f"-u {k}" for k, v in sorted(shown_env.items()))
    (folder / "command.txt").write_text(f"{sets}\n{shown}\n")
    code, why, seconds = procs.run(args, shell=command.shell, env=_env(overrides), out=folder / "output.txt",
                                   timeout=timeout, on_start=on_start)
    (folder / "exit_code").write_text(f"{code}\n")
    crashed = why is not None or code < 0
    return {"command": shown, "env": overrides, "exit_code": code, "crashed": crashed,
            "why": why or (f"killed by signal {-code}" if code < 0 else None), "seconds": round(seconds, 3),
            "tail": _tail(folder / "output.txt"), "dir": f"pending/{folder.name}",
            "dump": f"pending/{folder.name}/dump" if record else None}


def _tail(path: Path) -> str:
    data = path.read_bytes()[-TAIL_CHARS:]
    return data.decode("utf-8", "replace")


def _safe(label: str) -> str:
    name = "".join(c if (c.isascii() and c.isalnum()) or c in "._+-=," else "_" for c in label)[:80]
    return name or "run"

"""The state file of one bisect: its arguments, every run, every verdict, the answer.

A bisect keeps everything in its work directory; ``state.json`` is rewritten atomically after each
run, so a bisect killed at any point resumes from it: the search is deterministic, so it asks again
for the same runs in the same order and the finished ones are answered from here, not redone.

What is read back is checked before anything runs (:class:`StateMismatch`, one line, otherwise):

- the file is a regular file (a FIFO or a device would hang the read; a link could point anywhere),
  of bounded size, the schema of this version;
- a digest of the arguments and a digest of each run and each verdict (SHA-256 of their canonical
  JSON, the arguments' digest mixed in) match: an edited run or verdict is refused, not believed.
  The digests catch edits and damage, not a forger who recomputes them: that is what the path
  checks are for;
- every run's folder is ``pending|good|bad|inconclusive/NNN-label`` inside the work directory (a
  crafted state cannot make the bisect move a folder from elsewhere into it), its dump that folder's
  ``dump``.

A verdict is ``{"passed", "inconclusive", ...}``. One written before ``inconclusive`` existed (same
schema version: the field is an addition) is read as today's rules judge what it kept
(:func:`~inkling_probe.bisect.oracle.upgraded`), so a resumed bisect asks what a fresh one would.

``live`` names the process groups of runs that were running when the state was saved
(:mod:`~inkling_probe.procs`); the runner reaps them on resume.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from inkling_probe.bisect.oracle import upgraded
from inkling_probe.errors import ProbeError

VERSION = 2
FILE = "state.json"
MAX_BYTES = 64 << 20
SIDES = ("pending", "good", "bad", "inconclusive")
_FOLDER = re.compile(r"^(pending|good|bad|inconclusive)/(\d{3,})-[A-Za-z0-9._+=,-]{1,100}$")
_RUN_FIELDS = {"key": str, "label": str, "n": int, "command": str, "env": dict, "exit_code": int,
               "crashed": bool, "dir": str, "seconds": (int, float), "tail": str}


class StateMismatch(ProbeError):
    """The work directory holds a bisect with other arguments, or a state file that fails its checks."""


def digest(obj, salt: str = "") -> str:
    """SHA-256 of ``salt`` and the canonical JSON of ``obj`` (``digest`` and ``resumed`` fields left out)."""
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k not in ("digest", "resumed")}
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256((salt + "\n" + text).encode()).hexdigest()


class State:
    """Runs (by key), verdicts (by key), live process groups and the answer of the bisect in ``workdir``."""

    def __init__(self, workdir, kind: str, args: dict):
        self.workdir = Path(workdir)
        self.path = self.workdir / FILE
        self.kind, self.args = kind, _plain(args)
        self.salt = digest({"kind": kind, "args": self.args})
        self.runs: list[dict] = []
        self.verdicts: dict[str, dict] = {}
        self.live: list[dict] = []
        self.answer: dict | None = None
        _check_workdir(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.workdir)
        if os.path.lexists(self.path):
            self._load()
        else:
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

    def close(self) -> None:
        """Release the work directory's lock (also released when the process ends)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def set_live(self, live: list[dict]) -> None:
        self.live = live
        self.save()

    def inside(self, rel: str) -> Path:
        """``workdir / rel`` for a checked run folder (or its dump); refused when it leaves the work
        directory or passes through a link."""
        base = self.workdir.resolve()
        p = self.workdir / rel
        parts = Path(rel).parts
        for i in range(1, len(parts) + 1):
            q = self.workdir.joinpath(*parts[:i])
            if q.is_symlink():
                raise StateMismatch(f"{q}: a link inside the bisect's work directory; refused")
        if os.path.commonpath([base, p.resolve()]) != str(base):
            raise StateMismatch(f"{rel!r}: outside the work directory {self.workdir}; refused")
        return p

    def save(self) -> None:
        runs = [{**{k: v for k, v in r.items() if k != "resumed"}, "digest": digest(r, self.salt)} for r in self.runs]
        verdicts = {k: {**v, "digest": digest({"key": k, **v}, self.salt)} for k, v in self.verdicts.items()}
        doc = {"version": VERSION, "kind": self.kind, "args": self.args, "args_digest": self.salt,
               "runs": runs, "verdicts": verdicts, "live": self.live, "answer": self.answer}
        fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=self.workdir)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- reading back -----------------------------------------------------------------------
    def _load(self) -> None:
        doc = _read(self.path)
        if doc.get("version") != VERSION:
            raise StateMismatch(f"{self.path}: state version {doc.get('version')!r}, this inkling-probe "
                                f"writes {VERSION}; use a new --workdir")
        if doc.get("kind") != self.kind or doc.get("args") != self.args:
            args = doc.get("args") if isinstance(doc.get("args"), dict) else {}
            changed = sorted(k for k in set(self.args) | set(args) if self.args.get(k) != args.get(k))
            raise StateMismatch(f"{self.workdir} holds a bisect {doc.get('kind')} with other arguments "
                                f"({', '.join(changed) or 'kind'} differ); use a new --workdir")
        if doc.get("args_digest") != self.salt:
            raise StateMismatch(f"{self.path}: the arguments' digest does not match (edited?); refused")
        self.runs = [self._checked_run(i, r) for i, r in enumerate(_typed(doc, "runs", list))]
        self.verdicts = {k: self._checked_verdict(k, v) for k, v in _typed(doc, "verdicts", dict).items()}
        self.live = [_checked_live(x, self.path) for x in _typed(doc, "live", list)]
        for r in self.runs:
            r["resumed"] = True

    def _checked_run(self, i: int, r) -> dict:
        where = f"{self.path}: run {i + 1}"
        if not isinstance(r, dict):
            raise StateMismatch(f"{where}: not an object")
        for name, kind in _RUN_FIELDS.items():
            if not isinstance(r.get(name), kind) or (kind is int and isinstance(r.get(name), bool)):
                raise StateMismatch(f"{where}: field {name!r} missing or of the wrong type")
        if r.get("digest") != digest(r, self.salt):
            raise StateMismatch(f"{where} ({r['label']}) does not match its digest (edited?); refused")
        m = _FOLDER.match(r["dir"])
        if r["n"] != i + 1 or not m or int(m.group(2)) != r["n"]:
            raise StateMismatch(f"{where}: folder {r['dir']!r} is not pending|good|bad|inconclusive/{i + 1:03d}-LABEL; "
                                "refused")
        if r.get("dump") not in (None, f"{r['dir']}/dump"):
            raise StateMismatch(f"{where}: dump {r.get('dump')!r} is not {r['dir']}/dump; refused")
        if any(x["key"] == r["key"] for x in self.runs[:i]):
            raise StateMismatch(f"{where}: key {r['key']!r} twice; refused")
        return {k: v for k, v in r.items() if k != "digest"}

    def _checked_verdict(self, key: str, v) -> dict:
        if not isinstance(v, dict) or not isinstance(v.get("passed"), bool) \
                or not isinstance(v.get("inconclusive", False), bool):
            raise StateMismatch(f"{self.path}: verdict {key!r} is not an object with 'passed' (and a boolean "
                                "'inconclusive')")
        if v.get("digest") != digest({"key": key, **v}, self.salt):
            raise StateMismatch(f"{self.path}: verdict {key!r} does not match its digest (edited?); refused")
        return upgraded({k: x for k, x in v.items() if k != "digest"})


def _lock(workdir: Path):
    """An exclusive lock on the work directory for this process's life (a POSIX record lock: the kernel
    drops it when the process dies, however; the same process may take it again): a second bisect in
    the same directory is refused, and the groups the state names as live belong to no running bisect."""
    import fcntl

    try:
        fd = os.open(workdir / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        raise StateMismatch(f"{workdir}/.lock: cannot open ({e.strerror}); refused") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StateMismatch(f"{workdir}: another bisect is running in this work directory") from None
    return fd


def _check_workdir(workdir: Path) -> None:
    if os.path.lexists(workdir) and not workdir.is_dir():
        raise StateMismatch(f"--workdir {workdir}: exists and is not a directory")


def _read(path: Path) -> dict:
    """The JSON of a regular file, opened without following a link or blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise StateMismatch(f"{path}: cannot open the state file ({e.strerror}); not a regular file? "
                            "use a new --workdir") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise StateMismatch(f"{path}: not a regular file; refused")
        if st.st_size > MAX_BYTES:
            raise StateMismatch(f"{path}: {st.st_size} bytes, more than a state file holds ({MAX_BYTES}); refused")
        data = f.read(MAX_BYTES + 1)
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise StateMismatch(f"{path}: unreadable state file ({e}); use a new --workdir") from None
    if not isinstance(doc, dict):
        raise StateMismatch(f"{path}: not a state file (no JSON object); use a new --workdir")
    return doc


def _typed(doc: dict, name: str, kind):
    value = doc.get(name)
    if not isinstance(value, kind):
        raise StateMismatch(f"{name!r} of the state file is not a {kind.__name__}; refused")
    return value


def _checked_live(x, path: Path) -> dict:
    ok = (isinstance(x, dict) and isinstance(x.get("pgid"), int) and not isinstance(x.get("pgid"), bool)
          and x["pgid"] > 1 and isinstance(x.get("dir"), str) and _FOLDER.match(x["dir"]))
    if not ok:
        raise StateMismatch(f"{path}: a live process group entry is malformed: {str(x)[:80]}; refused")
    return x


def _plain(args: dict) -> dict:
    """Arguments as JSON would give them back (tuples -> lists), so a reload compares equal."""
    return json.loads(json.dumps(args))

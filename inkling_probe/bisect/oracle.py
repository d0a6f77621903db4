"""Oracles: does a run pass? By its exit code, or by comparing its dump with a reference.

A crashed run (killed, timed out, could not start; for a compare oracle also a non-zero exit or a
dump that does not open) counts as failing by default; ``on_crash`` makes it pass or stop the bisect.

The oracle's own failures are not the run's: compare failing on dumps that open (a name map that
does not load, no key in common, any exception) raises :class:`OracleError`, and the bisect stops
with its reason; it is never counted as a divergence. A run passes a compare oracle only when every
row was checked and none diverged: rows compare could not check (``report.unchecked``) fail it,
as they make ``compare`` exit 1.
"""
from __future__ import annotations

from pathlib import Path

from inkling_probe.errors import ProbeError

CRASH_POLICIES = ("fail", "pass", "stop")


class CrashStop(ProbeError):
    """A run crashed and the policy is ``stop``."""


class BadOracle(ProbeError):
    """An oracle spec or its reference dump is bad input."""


class OracleError(ProbeError):
    """The oracle could not judge a run (compare failed on dumps that open): an error, not a verdict."""


class ExitOracle:
    """Exit code 0 passes, any other fails."""

    needs_dump = False
    spec = "exit"

    def judge(self, rec: dict, runner) -> dict:
        return {"passed": rec["exit_code"] == 0, "exit_code": rec["exit_code"]}


class CompareOracle:
    """The run's dump compared with ``ref`` (and ``control``): within tolerance passes."""

    needs_dump = True

    def __init__(self, ref: str, control: str | None = None, **options):
        self.ref, self.control, self.options = ref, control, options
        self.spec = f"compare:{ref}"
        for what, path in (("compare reference", ref), ("--control-dump", control)):
            if path is not None:
                _check_dump(what, path)

    def judge(self, rec: dict, runner) -> dict:
        if rec["exit_code"] != 0:
            return {"crashed": True, "why": f"exit code {rec['exit_code']} (no trustworthy dump)"}
        return compare_dumps(self.ref, runner.path(rec), self.control, self.options)


def _check_dump(what: str, path: str) -> None:
    from inkling_probe.store.reader import open_dump

    if not Path(path).exists():
        raise BadOracle(f"{what} {path}: no such dump")
    try:
        open_dump(path).close()
    except ProbeError as e:
        raise BadOracle(f"{what}: {e}") from None


def compare_dumps(ref: str, cand: str, control: str | None, options: dict) -> dict:
    """``{"passed", "first_divergence", "culprit", "unchecked"}`` of compare(ref, cand, control); a run
    whose dump does not open is a crash (``{"crashed": True, "why"}``); compare's own failure raises
    :class:`OracleError`."""
    from inkling_probe.compare import compare

    why = dump_problem(cand)
    if why:
        return {"crashed": True, "why": why}
    try:
        rep = compare(ref, cand, control, explain=False, **options)
    except Exception as e:  # noqa: BLE001 - whatever compare raises, the oracle failed, not the run
        kind = "" if isinstance(e, ProbeError) else f"{type(e).__name__}: "
        raise OracleError(f"compare could not judge {cand}: {kind}{e}") from None
    first, culprit = rep.first_divergence, rep.culprit
    unchecked = [f"{r.key} step {r.step} ({r.status}{': ' + r.note if r.note else ''})" for r in rep.unchecked]
    return {"passed": not rep.diverged and not unchecked, "first_divergence": first.key if first else None,
            "culprit": culprit.key if culprit else None,
            "culprit_step": culprit.step if culprit else None,
            "unchecked": unchecked[:20], "n_unchecked": len(unchecked)}


def dump_problem(path: str) -> str | None:
    """Why the dump at ``path`` does not open (None when it does)."""
    from inkling_probe.store.reader import open_dump

    if not Path(path).exists():
        return f"no dump at {path}"
    try:
        open_dump(path).close()
    except ProbeError as e:
        return f"its dump does not open: {e}"
    return None


def parse(spec: str, control: str | None = None, **options):
    """``exit`` or ``compare:REF`` -> an oracle."""
    if spec == "exit":
        if control:
            raise BadOracle("--control-dump needs --oracle compare:REF")
        names = {"threshold": "--threshold", "name_map": "--map", "include": "--include"}
        given = [names.get(k, k) for k in options]
        if given:
            raise BadOracle(f"{given[0]} needs --oracle compare:REF (the exit oracle compares nothing)")
        return ExitOracle()
    if spec.startswith("compare:") and spec[len("compare:"):]:
        return CompareOracle(spec[len("compare:"):], control, **options)
    raise BadOracle(f"--oracle {spec!r}: expected 'exit' or 'compare:REF_DUMP'")


def verdict(rec: dict, judged: dict, on_crash: str) -> dict:
    """The judged outcome with the crash policy applied: ``{"passed", "crashed", ...}``."""
    crashed = rec["crashed"] or judged.get("crashed", False)
    if not crashed:
        return {**judged, "crashed": False}
    why = judged.get("why") or rec.get("why") or "crashed"
    if on_crash == "stop":
        raise CrashStop(f"run {rec['n']} ({rec['label']}) crashed: {why}; see {rec['dir']}/output.txt "
                        "(--on-crash fail|pass to count crashes instead)")
    return {**judged, "crashed": True, "why": why, "passed": on_crash == "pass"}

"""Oracles: does a run pass, fail, or could it not be checked? By its exit code, or by comparing its
dump with a reference.

Three outcomes (:func:`outcome`): *pass*, *fail*, and *inconclusive*: the oracle could not check the
run, so it is neither. A run is inconclusive when it exits :data:`INCONCLUSIVE_EXIT` (125, ``git bisect
run``'s "skip"; ``inkling-probe compare`` exits 125 when it found no divergence but could not check some
rows), or, for a compare oracle, when compare found no divergence but left rows unchecked
(``report.unchecked``: unreadable, not comparable, too few rows judged). A divergence found fails the run
whatever else was left unchecked, as it makes ``compare`` exit 1. An inconclusive verdict is
``{"passed": False, "inconclusive": True, "why": <one line>}``: the searches never count it as failing.

A crashed run (killed, timed out, could not start; for a compare oracle also another non-zero exit or
a dump that does not open) counts as failing by default; ``on_crash`` makes it pass or stop the bisect.

The oracle's own failures are not the run's: compare failing on dumps that open (a name map that
does not load, no key in common, any exception) raises :class:`OracleError`, and the bisect stops
with its reason; it is never counted as a divergence.
"""
from __future__ import annotations

from pathlib import Path

from inkling_probe.errors import ProbeError

CRASH_POLICIES = ("fail", "pass", "stop")
INCONCLUSIVE_EXIT = 125  # "could not check": a run's (git bisect run's skip) and compare's exit status


class CrashStop(ProbeError):
    """A run crashed and the policy is ``stop``."""


class BadOracle(ProbeError):
    """An oracle spec or its reference dump is bad input."""


class OracleError(ProbeError):
    """The oracle could not judge a run (compare failed on dumps that open): an error, not a verdict."""


class ExitOracle:
    """Exit code 0 passes, 125 is inconclusive (the command could not check), any other fails."""

    needs_dump = False
    spec = "exit"

    def judge(self, rec: dict, runner) -> dict:
        if rec["exit_code"] == INCONCLUSIVE_EXIT:
            return could_not_check(rec)
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
        if rec["exit_code"] == INCONCLUSIVE_EXIT:
            return could_not_check(rec)
        if rec["exit_code"] != 0:
            return {"crashed": True, "why": f"exit code {rec['exit_code']} (no trustworthy dump)"}
        return compare_dumps(self.ref, runner.path(rec), self.control, self.options)


def could_not_check(rec: dict) -> dict:
    """The verdict of a run that exited 125: inconclusive."""
    return {"passed": False, "inconclusive": True, "exit_code": rec["exit_code"],
            "why": f"exit code {INCONCLUSIVE_EXIT}: the command could not check"}


def _check_dump(what: str, path: str) -> None:
    from inkling_probe.store.reader import open_dump

    if not Path(path).exists():
        raise BadOracle(f"{what} {path}: no such dump")
    try:
        open_dump(path).close()
    except ProbeError as e:
        raise BadOracle(f"{what}: {e}") from None


def compare_dumps(ref: str, cand: str, control: str | None, options: dict) -> dict:
    """``{"passed", "inconclusive", "first_divergence", "culprit", "unchecked"}`` of compare(ref, cand,
    control): a divergence fails, else unchecked rows make it inconclusive (``why``: compare's
    ``unchecked_reason``); a run whose dump does not open is a crash (``{"crashed": True, "why"}``);
    compare's own failure raises :class:`OracleError`."""
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
    skipped = bool(unchecked) and not rep.diverged
    return {"passed": not rep.diverged and not unchecked, "inconclusive": skipped,
            "first_divergence": first.key if first else None, "culprit": culprit.key if culprit else None,
            "culprit_step": culprit.step if culprit else None,
            "unchecked": unchecked[:20], "n_unchecked": len(unchecked),
            **({"why": rep.unchecked_reason} if skipped else {})}


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
    """The judged outcome with the crash policy applied: ``{"passed", "inconclusive", "crashed", ...}``."""
    crashed = rec["crashed"] or judged.get("crashed", False)
    if not crashed:
        return {"inconclusive": False, **judged, "crashed": False}
    why = judged.get("why") or rec.get("why") or "crashed"
    if on_crash == "stop":
        raise CrashStop(f"run {rec['n']} ({rec['label']}) crashed: {why}; see {rec['dir']}/output.txt "
                        "(--on-crash fail|pass to count crashes instead)")
    return {**judged, "crashed": True, "why": why, "passed": on_crash == "pass", "inconclusive": False}


def outcome(v: dict) -> str:
    """``"pass"``, ``"fail"`` or ``"inconclusive"`` (never counted as either) of a verdict."""
    if v.get("inconclusive"):
        return "inconclusive"
    return "pass" if v["passed"] else "fail"


def upgraded(v: dict) -> dict:
    """A verdict read from a state file written before verdicts had ``inconclusive``, judged by today's
    rules from what it kept: a compare verdict that failed on unchecked rows alone (no divergence
    named: a divergence only in a control row or a rank reads so too, the cautious side), or a run
    that exited 125, is inconclusive; every other keeps its meaning."""
    if "inconclusive" in v:
        return v
    if v.get("crashed") or v["passed"]:
        return {**v, "inconclusive": False}
    if v.get("exit_code") == INCONCLUSIVE_EXIT:
        return {**v, **could_not_check(v)}
    if v.get("n_unchecked") and not v.get("first_divergence") and not v.get("culprit"):
        why = f"could not check {v['n_unchecked']} row(s): {(v.get('unchecked') or ['?'])[0]}"
        return {**v, "inconclusive": True, "why": why}
    return {**v, "inconclusive": False}

"""``bisect flags``: the minimal set of toggles that, set to their bad values, makes the oracle fail.

A trial the oracle could not check (inconclusive) is not a failure: ddmin goes on as if it had not
failed (Zeller's "unresolved"), and since every later question depends on each answer, a search that
met one gives no set: the answer lists the inconclusive trials (and the smallest set seen failing).
"""
from __future__ import annotations

from inkling_probe.bisect.ddmin import ddmin
from inkling_probe.bisect.oracle import outcome
from inkling_probe.bisect.toggles import environment
from inkling_probe.bisect.trial import reason, skipped, trial
from inkling_probe.errors import ProbeError


class Precondition(ProbeError):
    """The search cannot start: the all-good run fails or the all-bad run passes."""


def _key(bad) -> str:
    return "bad:" + (",".join(sorted(bad)) or "-")


def bisect_flags(runner, oracle, command, toggles, on_crash: str = "fail") -> dict:
    """ddmin over ``toggles``: ``{"failing_set", "toggles", "tests", "inconclusive"}`` (``failing_set``
    None when any trial was inconclusive)."""
    names = [t.name for t in toggles]
    tests: dict[str, dict] = {}
    asked: dict[str, dict] = {}

    def judged(bad) -> str:
        label = "+".join(bad) if bad else "all-good"
        asked[_key(bad)] = {"trial": label, "bad": list(bad)}
        tests[_key(bad)] = trial(runner, oracle, on_crash, _key(bad), label, command, environment(toggles, set(bad)))
        return outcome(tests[_key(bad)])

    def fails(bad) -> bool:
        return judged(bad) == "fail"  # inconclusive: not a failure

    first = judged(names)
    if first == "pass":
        raise Precondition("the oracle passes with every flag at BAD: nothing to bisect")
    found = None
    if first == "fail":
        if fails([]):
            raise Precondition("the oracle fails with every flag at GOOD" + reason(tests[_key([])])
                               + ": the cause is not among these flags")
        found = ddmin(names, fails)
    unsure = skipped(tests, asked)
    if unsure:
        failed = [asked[k]["bad"] for k, v in tests.items() if outcome(v) == "fail"]
        return {"failing_set": None, "toggles": [], "tests": len(tests), "bad_env": {}, "inconclusive": unsure,
                "smallest_failing": min(failed, key=len) if failed else None}
    chosen = [t for t in toggles if t.name in found]
    return {"failing_set": found, "toggles": [t.as_dict() for t in chosen], "tests": len(tests),
            "bad_env": {t.env: t.bad for t in chosen}, "inconclusive": []}

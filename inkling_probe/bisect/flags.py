"""``bisect flags``: the minimal set of toggles that, set to their bad values, makes the oracle fail."""
from __future__ import annotations

from inkling_probe.bisect.ddmin import ddmin
from inkling_probe.bisect.toggles import environment
from inkling_probe.bisect.trial import reason, trial
from inkling_probe.errors import ProbeError


class Precondition(ProbeError):
    """The search cannot start: the all-good run fails or the all-bad run passes."""


def _key(bad) -> str:
    return "bad:" + (",".join(sorted(bad)) or "-")


def bisect_flags(runner, oracle, command, toggles, on_crash: str = "fail") -> dict:
    """ddmin over ``toggles``: ``{"failing_set", "toggles", "tests"}``."""
    names = [t.name for t in toggles]
    tests: dict[str, dict] = {}

    def fails(bad) -> bool:
        label = "+".join(bad) if bad else "all-good"
        tests[_key(bad)] = trial(runner, oracle, on_crash, _key(bad), label, command, environment(toggles, set(bad)))
        return not tests[_key(bad)]["passed"]

    if not fails(names):
        raise Precondition("the oracle passes with every flag at BAD: nothing to bisect")
    if fails([]):
        raise Precondition("the oracle fails with every flag at GOOD" + reason(tests[_key([])])
                           + ": the cause is not among these flags")
    found = ddmin(names, fails)
    chosen = [t for t in toggles if t.name in found]
    return {"failing_set": found, "toggles": [t.as_dict() for t in chosen], "tests": len(tests),
            "bad_env": {t.env: t.bad for t in chosen}}

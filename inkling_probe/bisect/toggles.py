"""Toggles: named environment variables with a good and a bad value, from the CLI or a model plug-in."""
from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass

from inkling_probe import plugins
from inkling_probe.errors import ProbeError


class BadToggle(ProbeError):
    """A toggle spec that does not parse, or toggles that clash."""


@dataclass(frozen=True)
class Toggle:
    """``env`` is set to ``good`` or ``bad`` (None: unset) for each run."""

    name: str
    env: str
    good: str | None
    bad: str | None
    doc: str = ""
    needs: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def parse_flag(text: str) -> Toggle:
    """``NAME=GOOD:BAD`` (NAME the variable; an empty GOOD or BAD unsets it) -> a Toggle."""
    name, eq, values = text.partition("=")
    good, colon, bad = values.partition(":")
    if not eq or not colon or not name.strip() or not name.replace("_", "").isalnum():
        raise BadToggle(f"--flag {text!r}: expected NAME=GOOD:BAD, e.g. INKLING_CUDA_GRAPH=0:1")
    if good == bad:
        raise BadToggle(f"--flag {text!r}: GOOD and BAD are the same")
    return Toggle(name, name, good or None, bad or None)


def model_toggles(model: str, select: str | None = None) -> list[Toggle]:
    """The toggles a model registers in ``inkling_probe.toggles`` (names matching ``select`` globs)."""
    factory = plugins.load(plugins.TOGGLES, model, "--model")
    found = [Toggle(**{k: d.get(k) for k in ("name", "env", "good", "bad", "doc", "needs")}) for d in factory()]
    if select:
        globs = [g.strip() for g in select.split(",") if g.strip()]
        found = [t for t in found if any(fnmatch.fnmatchcase(t.name, g) for g in globs)]
        if not found:
            raise BadToggle(f"--select {select!r}: no toggle of {model} matches")
    return found


def check_distinct(toggles: list[Toggle]) -> None:
    """Each name and each variable once; at least one toggle."""
    if not toggles:
        raise BadToggle("no toggles: pass --flag NAME=GOOD:BAD or --model NAME")
    for attr in ("name", "env"):
        seen: set[str] = set()
        for t in toggles:
            value = getattr(t, attr)
            if value in seen:
                raise BadToggle(f"two toggles have the {attr} {value!r}")
            seen.add(value)


def environment(toggles: list[Toggle], bad: set[str]) -> dict:
    """Each toggle's variable at its bad value (name in ``bad``) or its good one."""
    return {t.env: (t.bad if t.name in bad else t.good) for t in toggles}

"""The registry of environment variables that change what a run computes, and the values a
candidate ran with: what a bug report's ``repro.sh`` and ``test_repro.py`` must carry.

Sources: the toolkit's own list (:data:`GENERIC`: variables of NCCL that change reduction order)
and every plug-in of the ``inkling_probe.computation_env`` entry-point group (a function returning
``{name: why}``; a name ending in ``*`` is a prefix, e.g. ``INKLING_FAULT_*``). inkling_model
registers its faults, all-reduce strategy, per-layer precision and graph switches.

The values come from the candidate dump's run metadata (``run.env``, which the recorder keeps for
``INKLING_*``, ``NCCL_*`` and ``CUDA_*``); a registered variable the run did not have is recorded as
unset (None), and the repro unsets it too, so the reader's own shell cannot change the result.
Variables the recorder does not keep cannot be carried; they are listed as ``not_recorded``.
"""
from __future__ import annotations

import re
from importlib.metadata import entry_points

from inkling_probe.plugins import COMPUTATION_ENV as GROUP

RECORDED_PREFIXES = ("INKLING_", "NCCL_", "CUDA_")  # what the recorder keeps of a run's environment
GENERIC = {
    "NCCL_ALGO": "NCCL's all-reduce algorithm (ring/tree): the summation order",
    "NCCL_PROTO": "NCCL's protocol (LL/LL128/Simple): the summation order",
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def registry() -> dict[str, str]:
    """``{name or PREFIX*: why it changes the computation}``: the toolkit's and every plug-in's."""
    out = dict(GENERIC)
    for ep in entry_points(group=GROUP):
        try:
            found = ep.load()()
        except Exception as e:  # noqa: BLE001 - a broken plug-in is named, not fatal to the report
            why = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
            out[f"<{ep.name}>"] = f"plug-in {ep.value} failed: {why}"
            continue
        for name, why in dict(found).items():
            if isinstance(name, str) and _NAME.match(name):
                out.setdefault(name, str(why))
    return out


def matches(name: str, reg: dict[str, str]) -> bool:
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in reg if _NAME.match(p))


def settings(env: dict | None, reg: dict[str, str] | None = None) -> dict:
    """``{"values": {name: value or None (unset)}, "registry": reg, "not_recorded": [...],
    "recorded": bool}`` for a run whose recorded environment is ``env`` (None: the dump recorded
    none; then nothing is known, ``values`` is empty and the repro leaves the shell's own)."""
    reg = registry() if reg is None else reg
    recorded = env is not None
    env = {str(k): str(v) for k, v in (env or {}).items()}
    values = {n: env.get(n) for n in sorted(reg) if not n.endswith("*") and _NAME.match(n)} if recorded else {}
    values.update({n: v for n, v in sorted(env.items()) if matches(n, reg)})
    missing = sorted(n for n in reg if _NAME.match(n) and not n.startswith(RECORDED_PREFIXES))
    return {"values": dict(sorted(values.items())), "registry": reg, "not_recorded": missing,
            "recorded": recorded}


def of_dump(dump, reg: dict[str, str] | None = None) -> dict:
    """:func:`settings` of a dump's run (rank 0's recorded environment; the ranks share it)."""
    segments = getattr(dump, "segments", None) or []
    run = segments[0].run if segments else None
    return settings((run or {}).get("env") if run else None, reg)

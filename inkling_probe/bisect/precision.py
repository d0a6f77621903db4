"""``bisect precision``: the fewest layers that must run at reference precision for the oracle to pass.

The command reads the layer list from a variable (inkling_model: ``INKLING_BF16_LAYERS``, the
routed experts of those layers unquantized). ddmin over the layers, with "passes" as the outcome
it keeps, gives a 1-minimal set: dropping any one layer from it makes the oracle fail. A set the
oracle could not check (inconclusive) is not a pass: ddmin does not keep it, and a search that met one
gives no set: the answer lists the inconclusive trials (and the smallest set seen passing).
"""
from __future__ import annotations

from inkling_probe.bisect.ddmin import ddmin
from inkling_probe.bisect.flags import Precondition
from inkling_probe.bisect.oracle import outcome
from inkling_probe.bisect.trial import reason, skipped, trial
from inkling_probe.errors import ProbeError

DEFAULT_VAR = "INKLING_BF16_LAYERS"
MAX_LAYER_ID = 65535  # a bound before any set is built: "0-99999999999" is a typo, not a model


class BadLayers(ProbeError, ValueError):
    """A layer spec that does not parse."""


def parse_layers(spec: str, what: str = "--layers", allow_empty: bool = False) -> list[int]:
    """``"3-5"``, ``"3,5,7"``, ``"2-4,9"`` -> sorted layer ids (``what`` names the spec in errors)."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        a, sep, b = part.partition("-")
        try:
            lo, hi = int(a), int(b) if sep else int(a)
        except ValueError:
            raise BadLayers(f"{what} {spec!r}: {part!r} is not a layer id or range A-B") from None
        if lo < 0 or hi < lo:
            raise BadLayers(f"{what} {spec!r}: {part!r} is not an increasing range of ids >= 0")
        if hi > MAX_LAYER_ID:
            raise BadLayers(f"{what} {spec!r}: layer {hi} is past {MAX_LAYER_ID}; no model has that many")
        out.update(range(lo, hi + 1))
    if not out and not allow_empty:
        raise BadLayers(f"{what} {spec!r}: no layers")
    return sorted(out)


def check_against(layers: list[int], present: list[int], source: str, what: str = "--layers") -> None:
    """Every requested layer exists in the model (``present``: the layer ids ``source`` shows)."""
    missing = [i for i in layers if i not in set(present)]
    if present and missing:
        raise BadLayers(f"{what}: layer(s) {','.join(map(str, missing[:8]))} not in the model ({source} has "
                        f"layers {min(present)}-{max(present)})")


def bisect_precision(runner, oracle, command, layers: list[int], var: str = DEFAULT_VAR,
                     on_crash: str = "fail") -> dict:
    """``{"reference_layers", "quantized_layers", "tests", "inconclusive"}``: the layers to keep at reference
    precision (None when any trial was inconclusive)."""
    tests: dict[str, dict] = {}
    asked: dict[str, dict] = {}

    def judged(kept) -> str:
        text = ",".join(map(str, kept))
        key = f"{var}={text}"
        asked[key] = {"trial": f"ref-{text or 'none'}", "reference_layers": list(kept)}
        tests[key] = trial(runner, oracle, on_crash, key, asked[key]["trial"], command, {var: text})
        return outcome(tests[key])

    def passes(kept) -> bool:
        return judged(kept) == "pass"  # inconclusive: not a pass

    first = judged(layers)
    if first == "fail":
        v = tests[f"{var}={','.join(map(str, layers))}"]
        raise Precondition(f"the oracle fails with every layer in {var}{reason(v)}: precision is not the cause")
    found = None
    if first == "pass":
        found = [] if passes([]) else ddmin(layers, passes)
    unsure = skipped(tests, asked)
    if unsure:
        passed = [asked[k]["reference_layers"] for k, v in tests.items() if outcome(v) == "pass"]
        return {"reference_layers": None, "quantized_layers": None, "variable": var, "tests": len(tests),
                "inconclusive": unsure, "smallest_passing": min(passed, key=len) if passed else None}
    return {"reference_layers": found, "quantized_layers": [i for i in layers if i not in found],
            "variable": var, "tests": len(tests), "inconclusive": []}

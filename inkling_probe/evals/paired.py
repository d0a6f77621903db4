"""Paired comparison of two systems' per-item eval results (``inkling-probe paired``).

Each input is JSON lines ``{"id": ..., "correct": true|false|0|1}`` or ``{"id": ..., "score": x}``,
optionally with ``"seed"`` (repeated runs, e.g. 5 seeds x 100 items). Items pair up by (seed, id).
Per seed and pooled: flips both ways (``a_only``: A right and B wrong, or A scoring higher; ``b_only``
the reverse), the exact McNemar p, accuracies and ``delta`` = mean(B) - mean(A) with a seeded
bootstrap CI (items resampled whole, all their seeds together). The gate passes when the pooled
``|delta| <= gate``. Items present on one side only are listed and counted, never dropped silently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inkling_probe.evals import jsonl, stats
from inkling_probe.evals.jsonl import EvalInputError

NO_SEED = None


@dataclass
class Results:
    """One system's results: value per (seed, id), and which field they came from."""

    path: str
    kind: str  # "correct" or "score"
    values: dict  # (seed, id) -> float


def load(path: str) -> Results:
    """Read a results file; bad lines raise :class:`EvalInputError` naming file, line, key and value."""
    values, kind, seeded = {}, None, None
    for n, obj in jsonl.read(path):
        item = obj.get("id")
        if item is None or isinstance(item, (dict, list, bool, float)):
            raise jsonl.bad(path, n, "id", item, "a string or integer item id")
        line_kind = _kind(path, n, obj)
        if kind not in (None, line_kind):
            raise EvalInputError(f"{path}:{n}: has {line_kind!r} where earlier lines have {kind!r}")
        kind = line_kind
        if seeded is not None and seeded != ("seed" in obj):
            raise EvalInputError(f"{path}:{n}: 'seed' on some lines only (id {item!r})")
        seeded = "seed" in obj
        if seeded and (isinstance(obj["seed"], bool) or not isinstance(obj["seed"], (int, str))):
            raise jsonl.bad(path, n, "seed", obj["seed"], "an integer or string seed")
        key = (obj.get("seed", NO_SEED), item)
        if key in values:
            raise EvalInputError(f"{path}:{n}: id {item!r}" + (f" seed {key[0]!r}" if seeded else "")
                                 + " appears twice")
        values[key] = _value(path, n, obj, line_kind)
    return Results(path, kind, values)


def _kind(path: str, n: int, obj: dict) -> str:
    has = [k for k in ("correct", "score") if k in obj]
    if len(has) != 1:
        raise EvalInputError(f"{path}:{n}: needs exactly one of 'correct' and 'score' (id {obj.get('id')!r})")
    return has[0]


def _value(path: str, n: int, obj: dict, kind: str) -> float:
    v = obj[kind]
    if kind == "correct":
        if isinstance(v, bool) or v in (0, 1):
            return float(v)
        raise jsonl.bad(path, n, "correct", v, "true, false, 0 or 1")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise jsonl.bad(path, n, "score", v, "a finite number")
    return float(v)


@dataclass
class Paired:
    """The comparison of one group of pairs (one seed, or all pooled)."""

    seed: object
    n: int
    a_only: int
    b_only: int
    mcnemar_p: float
    mean_a: float
    mean_b: float
    delta: float
    ci: tuple[float, float]

    def to_dict(self) -> dict:
        return {"seed": self.seed, "n": self.n, "a_only": self.a_only, "b_only": self.b_only,
                "mcnemar_p": self.mcnemar_p, "mean_a": self.mean_a, "mean_b": self.mean_b,
                "delta": self.delta, "ci": list(self.ci)}


@dataclass
class Report:
    """Pooled and per-seed comparisons, the one-sided items and the gate's verdict."""

    a: str
    b: str
    kind: str
    gate: float
    pooled: Paired
    per_seed: list[Paired]
    only_a: list = field(default_factory=list)  # (seed, id) in A only
    only_b: list = field(default_factory=list)
    bootstrap: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return abs(self.pooled.delta) <= self.gate

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "kind": self.kind, **self.pooled.to_dict(), "gate": self.gate,
                "pass": self.passed, "per_seed": [p.to_dict() for p in self.per_seed],
                "only_a": [_item(k) for k in self.only_a], "only_b": [_item(k) for k in self.only_b],
                "bootstrap": self.bootstrap}


def _item(key) -> dict:
    seed, item = key
    return {"id": item} if seed is NO_SEED else {"seed": seed, "id": item}


def compare(a: Results, b: Results, gate: float = 0.02, seed: int = 0, resamples: int = 10000,
            level: float = 0.95) -> Report:
    """Pair ``a`` and ``b`` and compute every statistic (module docstring)."""
    if a.kind != b.kind:
        raise EvalInputError(f"{b.path}: has {b.kind!r} results where {a.path} has {a.kind!r}")
    common = sorted(set(a.values) & set(b.values), key=_order)
    if not common:
        raise EvalInputError(f"{b.path}: no item (seed, id) in common with {a.path}")
    boot = {"resamples": resamples, "seed": seed, "level": level}
    groups = sorted({s for s, _ in common}, key=_order)
    per_seed = [] if groups == [NO_SEED] else [_paired(s, [k for k in common if k[0] == s], a, b, boot) for s in groups]
    only_a = sorted(set(a.values) - set(b.values), key=_order)
    only_b = sorted(set(b.values) - set(a.values), key=_order)
    return Report(a.path, b.path, a.kind, gate, _paired("pooled", common, a, b, boot), per_seed, only_a, only_b, boot)


def _order(x):
    """Sort key for ids/seeds of mixed types (ints before strings, None first)."""
    if isinstance(x, tuple):
        return tuple(_order(v) for v in x)
    return (0, 0, "") if x is None else (1, x, "") if isinstance(x, int) else (2, 0, str(x))


def _paired(label, keys: list, a: Results, b: Results, boot: dict) -> Paired:
    va = np.array([a.values[k] for k in keys])  # [n]
    vb = np.array([b.values[k] for k in keys])  # [n]
    a_only, b_only = int((va > vb).sum()), int((vb > va).sum())
    by_item: dict = {}
    for k, d in zip(keys, vb - va):
        by_item.setdefault(k[1], []).append(d)
    ci = stats.bootstrap_ci([np.array(v) for v in by_item.values()], **boot)
    return Paired(label, len(keys), a_only, b_only, stats.mcnemar_exact(a_only, b_only), float(va.mean()),
                  float(vb.mean()), float(vb.mean() - va.mean()), ci)

"""Probe keys as integer ids fixed at trace time, resolved to names when the op runs.

Under dynamo a probe's name (a str), its layout arguments and its own meta are constants of the
trace: :func:`key_id` runs once per probe call site per compile (``assume_constant_result``: dynamo
calls it with the constants and bakes the int into the graph, no guard on the name, so no recompile
per key) and answers -1 for a name the recording's include/exclude globs leave out, which then
leaves no node. :func:`deliver` is the op's run-time half: id -> (name, probe arguments) -> the active
recorder's ``record``, the same call an eager probe makes, with the step's layout (``step()``) as of
the moment it runs.

The table is per process and only grows (one entry per distinct call site and arguments); ids are
never reused, so a graph compiled under one recording stays correct under the next.
"""
from __future__ import annotations

import threading

import torch

from inkling_probe import sink
from inkling_probe.settings import matches_any

TRACED = "compiled"  # meta key set on every row recorded through the op: how the compiled side is told apart

_TABLE: list[tuple[str, dict]] = []  # id -> (name, probe kwargs)
_IDS: dict[tuple, int] = {}
_LOCK = threading.Lock()


def selection() -> tuple | None:
    """What a traced probe depends on besides its own constants: None when recording is off, else the
    active recording's (include, exclude) globs. dynamo guards on this value (sink reads it)."""
    rec = sink.active_recorder()
    if rec is None:
        return None
    s = getattr(rec, "settings", None)
    return (tuple(getattr(s, "include", ())), tuple(getattr(s, "exclude", ())))


@torch._dynamo.assume_constant_result
def key_id(name: str, shard: str, dim, token_dim, meta_items: tuple, select: tuple) -> int:
    """The id of this probe call site (a new one on first sight); -1 when ``select`` leaves it out."""
    include, exclude = select
    if (include and not matches_any(name, include)) or matches_any(name, exclude):
        return -1
    key = (name, shard, dim, token_dim, meta_items)
    with _LOCK:
        if key not in _IDS:
            _IDS[key] = len(_TABLE)
            _TABLE.append((name, {"shard": shard, "dim": dim, "token_dim": token_dim,
                                  "meta": {**dict(meta_items), TRACED: 1}}))
        return _IDS[key]


_LAYOUTS: list[dict] = []  # id -> a step()'s layout, as traced
_LAYOUT_IDS: dict[tuple, int] = {}


@torch._dynamo.assume_constant_result
def layout_id(items: tuple) -> int:
    """The id of a ``step(**layout)`` call's layout (its items, constants of the trace)."""
    with _LOCK:
        if items not in _LAYOUT_IDS:
            _LAYOUT_IDS[items] = len(_LAYOUTS)
            _LAYOUTS.append(dict(items))
        return _LAYOUT_IDS[items]


def next_step(key: int) -> None:
    """The step op's run-time half: ``sink.step(**layout)``, the eager call."""
    sink.step(**_LAYOUTS[key])


def resolve(key: int) -> tuple[str, dict]:
    """(name, probe kwargs) of id ``key``."""
    return _TABLE[key]


def deliver(key: int, tensor: torch.Tensor) -> None:
    """Record ``tensor`` under id ``key`` through the active recorder (nothing when none is active)."""
    rec = sink.active_recorder()
    if rec is None:
        return
    name, kw = _TABLE[key]
    layout = sink.step_layout()
    meta = {**layout, **kw["meta"]} if layout else kw["meta"]
    rec.record(name, tensor, shard=kw["shard"], dim=kw["dim"], token_dim=kw["token_dim"], meta=meta,
               once=False)  # Inductor reuses buffers without a version bump: no reference by identity

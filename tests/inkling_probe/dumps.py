"""Test helper: write small synthetic dumps with the real recorder (one process, ranks simulated).

Importable as ``dumps`` from every test folder under tests/inkling_probe (pyproject.toml puts this folder
on sys.path: it has no __init__.py).
"""
from __future__ import annotations

import os

import inkling_probe


def write(path, steps, rank: int = 0, world: int = 1, **settings):
    """``steps``: a list (one per step) of lists of (key, tensor) or (key, tensor, probe kwargs).

    ``settings`` go to :func:`inkling_probe.recording` (the writer defaults to ``inline``)."""
    old = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    try:
        with inkling_probe.recording(str(path), **{"writer": "inline", **settings}):
            for items in steps:
                inkling_probe.step()
                for item in items:
                    key, t, kw = (*item, {}) if len(item) == 2 else item
                    inkling_probe.probe(key, t, **kw)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return str(path)


def write_tp(path, per_rank_steps, **settings):
    """One dump from several simulated ranks: ``per_rank_steps[r]`` is rank r's ``steps``."""
    world = len(per_rank_steps)
    for r, steps in enumerate(per_rank_steps):
        write(path, steps, rank=r, world=world, **settings)
    return str(path)

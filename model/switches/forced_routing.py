"""Forced routing: the MoE routers take a reference dump's top-k expert ids (``run --force-routing``).

A candidate re-run with the reference's routing has no routing flips, so compare judges every row
of every key exactly (no row set aside, no allowance for a flip's reach). The router still computes
its own scores; only the chosen ids are replaced, so the weights are the candidate's own scores at
the reference's experts.

The reference's ids are ``layers.<i>.mlp.topk_idx`` (inkling_model's key; a transformers dump is
read through the shipped ``hf_inkling`` name map). The n-th forward of a process takes the n-th
recorded step; a forward whose token count differs from the reference's at that step is an error
(one line, naming the dump, layer and step). Switched on with ``INKLING_FORCE_ROUTING=<dump>``
(spawned ranks inherit it); read once per process.
"""
from __future__ import annotations

import os

import numpy as np

ENV = "INKLING_FORCE_ROUTING"


class ForcedRouting:
    """The reference's top-k ids by (step index, layer)."""

    def __init__(self, path: str):
        from inkling_probe.compare.align import entries, layer_of
        from inkling_probe.store.namemap import NameMap
        from inkling_probe.store.reader import as_dump

        self.path = path
        dump = as_dump(path)
        ents = {k: e for k, e in entries(dump).items() if k[0].endswith(".mlp.topk_idx")}
        if not ents:
            ents = {k: e for k, e in entries(dump, NameMap.load("hf_inkling")).items()
                    if k[0].endswith(".mlp.topk_idx")}
        if not ents:
            raise ValueError(f"{ENV}={path}: the dump holds no layers.<i>.mlp.topk_idx to force routing with")
        self.steps = sorted({s for (_k, s, _c) in ents})
        self.ids = {(s, layer_of(k)): np.asarray(dump.array(e.key, step=s, call=e.call)).reshape(-1, e.global_shape()[-1])
                    for (k, s, c), e in ents.items() if c == 0}
        self.forward, self.last_layer = -1, None

    def take(self, layer: int, n_tokens: int):
        """The reference's ids ``[T, k]`` (numpy int64) for this layer of the current forward."""
        if self.last_layer is None or layer <= self.last_layer:
            self.forward += 1
        self.last_layer = layer
        if self.forward >= len(self.steps):
            raise ValueError(f"{ENV}={self.path}: forward {self.forward} has no recorded step "
                             f"(the dump holds {len(self.steps)})")
        step = self.steps[self.forward]
        ids = self.ids.get((step, layer))
        if ids is None:
            raise ValueError(f"{ENV}={self.path}: no layers.{layer}.mlp.topk_idx at step {step}")
        if ids.shape[0] != n_tokens:
            raise ValueError(f"{ENV}={self.path}: layers.{layer}.mlp.topk_idx step {step} has {ids.shape[0]} "
                             f"token rows, this forward {n_tokens}: run the same tokens")
        return ids.astype(np.int64)


_active: dict = {}


def active() -> ForcedRouting | None:
    """The process's forced routing (from ``INKLING_FORCE_ROUTING``), or None."""
    path = os.environ.get(ENV, "")
    if not path:
        return None
    if _active.get("path") != path:
        _active.update(path=path, routing=ForcedRouting(path))
    return _active["routing"]


def reset() -> None:
    """Forget the loaded reference (tests; a new run in the same process starts at step 0)."""
    _active.clear()

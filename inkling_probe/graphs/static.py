"""Probes inside CUDA-graph capture: a plan from the warm-up run, then copies into a static arena.

A captured graph cannot sync or allocate for a probe, so in-graph recording runs in two passes of
the same step code: the warm-up (eager) run goes through :class:`PlanRecorder`, which lays out one
slot per wanted probe call (name, shape, dtype, layout) in a byte arena; the arena is allocated
once, before capture and outside the graph's memory pool, and checked against the budget; the
capture run goes through :class:`CaptureRecorder`, which copies each probed tensor into its slot (one
copy node per probe). After a replay the arena drains to the store (drain.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from inkling_probe import sink
from inkling_probe.graph_budget import ALIGN, BUDGET_ENV, DEFAULT_BUDGET_MB, BudgetError, budget_bytes  # noqa: F401


@dataclass(frozen=True)
class Slot:
    """Where one probe call of the step lands in the arena, and what the recorder needs to store it."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    nbytes: int
    probe_kwargs: dict = field(default_factory=dict)


@dataclass
class Layout:
    """The slots of one captured graph, in probe-call order."""

    slots: list[Slot] = field(default_factory=list)
    used: int = 0  # bytes, aligned

    def add(self, name: str, t: torch.Tensor, probe_kwargs: dict) -> None:
        nbytes = t.numel() * t.element_size()
        self.slots.append(Slot(name, tuple(t.shape), t.dtype, self.used, nbytes, probe_kwargs))
        self.used += -(-nbytes // ALIGN) * ALIGN

    def view(self, arena: torch.Tensor, slot: Slot) -> torch.Tensor:
        """The arena bytes of ``slot`` as a tensor of its shape and dtype."""
        return arena[slot.offset: slot.offset + slot.nbytes].view(slot.dtype).view(slot.shape)


class PlanRecorder:
    """Installed during the warm-up run: lays out a slot for every probe call the settings want."""

    def __init__(self, settings):
        self.settings, self.layout = settings, Layout()

    def record(self, name, tensor, *, shard="replicated", dim=None, token_dim=0, meta=None) -> None:
        if isinstance(tensor, torch.Tensor) and self.settings.wants(name):
            step = sink.step_layout()  # the warm-up's: a replay declares its own (drain.py)
            own = {k: v for k, v in (meta or {}).items() if k not in step or step[k] != v}
            self.layout.add(name, tensor.detach(), dict(shard=shard, dim=dim, token_dim=token_dim, meta=meta,
                                                        own_meta=own))

    def next_step(self) -> None:
        """One step per forward: nothing to do while planning."""


class CaptureRecorder:
    """Installed during capture: copies each probed tensor into its planned arena slot."""

    def __init__(self, settings, layout: Layout, arena: torch.Tensor):
        if layout.used > arena.numel():
            raise BudgetError(f"in-graph recording layout of {layout.used} bytes does not fit its "
                              f"{arena.numel()}-byte arena")
        self.settings, self.layout, self.arena, self._next = settings, layout, arena, 0

    def record(self, name, tensor, *, shard="replicated", dim=None, token_dim=0, meta=None) -> None:
        if not (isinstance(tensor, torch.Tensor) and self.settings.wants(name)):
            return
        slots = self.layout.slots
        if self._next >= len(slots) or slots[self._next].name != name:
            raise RuntimeError(f"probe {name!r}: calls differ between the warm-up and the captured run")
        slot = slots[self._next]
        if tuple(tensor.shape) != slot.shape or tensor.dtype != slot.dtype:
            raise RuntimeError(f"probe {name!r}: {tuple(tensor.shape)} {tensor.dtype} in capture, "
                               f"{slot.shape} {slot.dtype} at warm-up")
        self.layout.view(self.arena, slot).copy_(tensor.detach())
        self._next += 1

    def next_step(self) -> None:
        """Steps are assigned at replay time (drain.py)."""

    def finish(self) -> None:
        """After capture: every planned slot must have been written."""
        if self._next != len(self.layout.slots):
            raise RuntimeError(f"capture wrote {self._next} of {len(self.layout.slots)} planned probe slots")


def check_budget(layout: Layout, budget: int, what: str) -> None:
    """Raise :class:`BudgetError` (one line) when ``layout`` needs more than ``budget`` bytes."""
    if layout.used > budget:
        raise BudgetError(f"in-graph recording of {what} needs {layout.used / 2**20:.2f} MiB of static "
                          f"buffers ({len(layout.slots)} probes), over the {budget / 2**20:.2f} MiB budget: "
                          f"raise {BUDGET_ENV} or narrow INKLING_PROBE_INCLUDE")

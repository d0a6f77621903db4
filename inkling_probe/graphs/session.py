"""In-graph recording for a set of captured graphs (one per batch size) sharing one arena.

A graph runner calls, per graph and largest first: :meth:`InGraphRecording.planning` around the
warm-up run, :meth:`capturing` around the capture, and after each replay :meth:`after_replay`
(starts the async drain) and :meth:`hand_over` (records into the active recorder under its
current step). The arena is allocated on the first (largest) plan, outside any graph pool.

A graph's slots were planned at its warm-up, whose rows were padding: which rows a replay holds and
whom they belong to (``rows``, and the step ``layout``, e.g. attention-DP's ``requests``) are the
runner's to say at each replay, on the host; the drain keeps those rows and stores that layout over
the planned one (no host sync inside the graph).
"""
from __future__ import annotations

import contextlib

import torch

from inkling_probe import sink
from inkling_probe.graphs.drain import ArenaDrain
from inkling_probe.graphs.static import CaptureRecorder, Layout, PlanRecorder, budget_bytes, check_budget


class InGraphRecording:
    """Static buffers, capture-time probe copies and the drain for ``recorder`` (the active one)."""

    def __init__(self, recorder, device, budget: int | None = None):
        self.recorder, self.settings, self.device = recorder, recorder.settings, torch.device(device)
        self.budget = budget_bytes() if budget is None else budget
        self.layouts: dict = {}
        self.arena: torch.Tensor | None = None
        self.drain: ArenaDrain | None = None

    @contextlib.contextmanager
    def planning(self, key):
        """Around the warm-up run of graph ``key``: lay out its probe slots (no recording)."""
        plan = PlanRecorder(self.settings)
        with sink.redirected(plan):
            yield plan.layout
        check_budget(plan.layout, self.budget, f"graph {key}")
        self.layouts[key] = plan.layout
        if self.arena is None:
            self.arena = torch.empty(max(plan.layout.used, 1), dtype=torch.uint8, device=self.device)
            self.drain = ArenaDrain(self.arena)
        elif plan.layout.used > self.arena.numel():
            raise RuntimeError(f"graph {key} needs {plan.layout.used} bytes, more than the arena planned for "
                               "the first graph: capture the largest batch first")

    @contextlib.contextmanager
    def capturing(self, key):
        """Around the capture of graph ``key``: probes copy into the arena (one node each)."""
        cap = CaptureRecorder(self.settings, self.layouts[key], self.arena)
        with sink.redirected(cap):
            yield
        cap.finish()

    def after_replay(self, key, rows: int | None = None, layout: dict | None = None) -> None:
        """Start draining graph ``key``'s slots (async D2H into pinned memory) when the step is wanted:
        its first ``rows`` token rows, recorded with the replay's step ``layout`` (module docstring)."""
        if self.recorder.step_id in self.settings.steps:
            self.drain.start(self.layouts[key], rows, layout)

    def check_active(self) -> bool:
        """True while this recording's recorder is the active one; False once recording stopped.

        Raises RuntimeError when another recorder took over (its settings were not planned for)."""
        active = sink.active_recorder()
        if active is None or active is self.recorder:
            return active is not None
        raise RuntimeError("a new recording started after the decode graphs were captured: "
                           "capture again inside it (Runtime.capture(again=True))")

    def hand_over(self) -> int:
        """Record the drained slots into the recorder (its current step); returns the bytes."""
        return self.drain.finish(self.recorder) if self.drain is not None else 0

    def layout(self, key) -> Layout:
        return self.layouts[key]

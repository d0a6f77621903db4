"""Drain the in-graph arena after a replay: one async device-to-host copy into pinned memory, then
each slot goes to the recorder under the replay's step id (the recorder's current step), its token
rows cut to the replay's real ones and its meta updated with the replay's step layout."""
from __future__ import annotations

import torch

from inkling_probe.graphs.static import Layout


class ArenaDrain:
    """Pinned host mirror of an arena; :meth:`start` copies (async), :meth:`finish` hands rows over."""

    def __init__(self, arena: torch.Tensor):
        self.arena = arena
        pinned = arena.is_cuda
        self.host = torch.empty(arena.numel(), dtype=torch.uint8, pin_memory=pinned)  # [bytes]
        self.event = torch.cuda.Event() if pinned else None
        self._pending: tuple[Layout, int | None, dict | None] | None = None
        self.bytes_drained = 0

    def start(self, layout: Layout, rows: int | None = None, step_layout: dict | None = None) -> None:
        """Enqueue the copy of ``layout``'s bytes on the current stream (after the replay); ``rows``:
        the replay's real token rows, ``step_layout``: its meta (``forward``, DP ``requests``...)."""
        if self._pending is not None:
            raise RuntimeError("drain: the previous replay's buffers were not handed over yet")
        self.host[: layout.used].copy_(self.arena[: layout.used], non_blocking=self.event is not None)
        if self.event is not None:
            self.event.record()
        self._pending = (layout, rows, step_layout)

    def finish(self, recorder) -> int:
        """Wait for the copy and record every slot (first ``rows`` tokens: padding dropped; the step
        layout over the planned meta); returns bytes."""
        if self._pending is None:
            return 0
        layout, rows, step_layout = self._pending
        self._pending = None
        if self.event is not None:
            self.event.synchronize()
        for slot in layout.slots:
            t = layout.view(self.host, slot)
            kw = slot.probe_kwargs
            if rows is not None and kw.get("token_dim") == 0 and t.dim() > 0 and t.shape[0] > rows:
                t = t[:rows]
            if recorder is not None:
                meta = kw["meta"] if step_layout is None else {**step_layout, **kw["own_meta"]}
                recorder.record(slot.name, t, shard=kw["shard"], dim=kw["dim"], token_dim=kw["token_dim"],
                                meta=meta)
        self.bytes_drained += layout.used
        return layout.used

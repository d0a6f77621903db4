"""Decode-step CUDA graphs, the nano-vllm way.

Static inputs (token ids, slots, positions) are sized for the largest batch; one graph per batch
size, captured largest first into one shared memory pool; replay = copy in, pad (padded rows
decode into the pool's scratch slot), replay, slice. With recording on, probes inside capture copy
into static buffers planned at warm-up (inkling_probe/graphs), drained after every replay.
"""

from __future__ import annotations

import contextlib

import torch

import inkling_probe
from inkling_model.layers.context import StepContext

BATCH_SIZES = (1, 2, 4, 8, 16, 32)


class StaticInputs:
    """Decode metadata buffers allocated once: ids, slots and positions for up to ``max_bs`` rows."""

    def __init__(self, max_bs: int, scratch_slot: int, device):
        self.max_bs, self.scratch = max_bs, scratch_slot
        self.ids = torch.zeros(max_bs, dtype=torch.long, device=device)  # [max_bs]
        self.slots = torch.full((max_bs,), scratch_slot, dtype=torch.long, device=device)  # [max_bs]
        self.positions = torch.zeros(max_bs, dtype=torch.long, device=device)  # [max_bs]

    def fill(self, ids, slots, positions, bs: int) -> None:
        """Copy ``n`` rows in and pad rows n..bs to the scratch slot at position 0."""
        n = len(ids)
        self.ids[:n].copy_(torch.as_tensor(ids), non_blocking=True)
        self.slots[:n].copy_(torch.as_tensor(slots), non_blocking=True)
        self.positions[:n].copy_(torch.as_tensor(positions), non_blocking=True)
        self.ids[n:bs].zero_()
        self.slots[n:bs].fill_(self.scratch)
        self.positions[n:bs].zero_()

    def context(self, pool, bs: int, request_ids=None, mode: str = "static-eager",
                graph_bs: int | None = None) -> StepContext:
        return StepContext.for_decode(pool, self.slots[:bs], self.positions[:bs], request_ids, mode, graph_bs)


def decode_step(model, inputs: StaticInputs, pool, bs: int, mode: str = "static-eager",
                request_ids=None) -> torch.Tensor:
    """One decode forward on the first ``bs`` static rows: logits [bs, V]."""
    graph_bs = bs if mode == "graph" else None
    return model(inputs.ids[:bs], inputs.context(pool, bs, request_ids, mode, graph_bs))


class GraphRunner:
    """Captured decode graphs for ``batch_sizes`` over ``pool`` (module docstring)."""

    def __init__(self, model, pool, max_bs: int, batch_sizes=BATCH_SIZES, debug: bool = False):
        self.model, self.pool = model, pool
        self.device = next(model.parameters()).device
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need the model on a CUDA device")
        self.batch_sizes = sorted({b for b in batch_sizes if b < max_bs} | {max_bs})
        self.inputs = StaticInputs(max_bs, pool.scratch, self.device)
        self.outputs = torch.zeros(max_bs, model.config.logits_vocab_size, dtype=model.dtype, device=self.device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.debug, self.recording = debug, None
        self.mempool = None

    def capture(self) -> None:
        """Warm up and capture every batch size, largest first, into one pool."""
        rec = inkling_probe.sink.active_recorder()
        if rec is not None:
            from inkling_probe.graphs.session import InGraphRecording
            self.recording = InGraphRecording(rec, self.device)
        for bs in reversed(self.batch_sizes):
            self._capture(bs)

    def _capture(self, bs: int) -> None:
        with self._planning(bs):  # warm-up: eager run (tunes auto all-reduce, allocates staging)
            decode_step(self.model, self.inputs, self.pool, bs, "graph")
        torch.cuda.synchronize(self.device)
        g = torch.cuda.CUDAGraph(keep_graph=True) if self.debug else torch.cuda.CUDAGraph()
        if self.debug:  # keeps the cudaGraph_t for debug_dump (node counts)
            g.enable_debug_mode()
        with torch.cuda.graph(g, pool=self.mempool), self._capturing(bs):
            self.outputs[:bs] = decode_step(self.model, self.inputs, self.pool, bs, "graph")
        self.mempool = self.mempool or g.pool()
        self.graphs[bs] = g
        torch.cuda.synchronize(self.device)

    def _planning(self, bs):
        return self.recording.planning(bs) if self.recording else contextlib.nullcontext()

    def _capturing(self, bs):
        return self.recording.capturing(bs) if self.recording else contextlib.nullcontext()

    def graph_size(self, n: int) -> int:
        """The smallest captured batch size holding ``n`` rows."""
        for bs in self.batch_sizes:
            if bs >= n:
                return bs
        raise ValueError(f"{n} requests exceed the largest captured batch {self.batch_sizes[-1]}")

    def replay(self, ids, slots, positions) -> torch.Tensor:
        """Decode ``n`` rows through the graph of the next size up; logits [n, V]."""
        n = len(ids)
        bs = self.graph_size(n)
        self.inputs.fill(ids, slots, positions, bs)
        recording = self._recording()
        inkling_probe.step()  # the replay's step id
        self.graphs[bs].replay()
        if recording is not None:
            recording.after_replay(bs, rows=n)
            recording.hand_over()
        return self.outputs[:n]

    def _recording(self):
        """The in-graph recording to drain into, if still active; probes the graphs lack are an error."""
        if self.recording is None:
            if inkling_probe.enabled():
                raise RuntimeError("recording started after the decode graphs were captured without probes: "
                                   "start it before the first decode, or capture again (Runtime.capture(again=True))")
            return None
        return self.recording if self.recording.check_active() else None

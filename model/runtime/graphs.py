"""Decode-step CUDA graphs, the nano-vllm way.

Static inputs (token ids, slots, positions) are sized for the largest batch; one graph per batch
size, captured largest first into one shared memory pool; replay = copy in, pad (padded rows
decode into the pool's scratch slot), replay, slice. With recording on, probes inside capture copy
into static buffers planned at warm-up (inkling_probe/graphs), drained after every replay, each
replay's rows named by its requests (the step layout handed to the drain on the host).

Under attention-DP every group must replay a graph of the same batch size (the MoE gathers every
group's rows with fixed sizes inside the graph, layers/moe.py): before each replay the groups agree
on it (a host all-gather of their row counts, outside the graph); an idle group replays it too, its
first row a padding request (PAD_REQUEST, as the eager runtime's idle step), the rest masked.

``capture=False`` runs the very same padded steps without capturing (``static-eager``): the graph
path's ops, shapes, in-graph recording copies and drain, on any device (the CPU tests over gloo).
"""

from __future__ import annotations

import contextlib

import torch

import inkling_probe
from inkling_model.generate import PAD_REQUEST
from inkling_model.layers.context import StepContext

BATCH_SIZES = (1, 2, 4, 8, 16, 32)


class StaticInputs:
    """Decode metadata buffers allocated once: ids, slots and positions for up to ``max_bs`` rows, and
    ``valid_rows`` [1], how many of them are real (a padded step's, read inside the graph)."""

    def __init__(self, max_bs: int, scratch_slot: int, device):
        self.max_bs, self.scratch = max_bs, scratch_slot
        self.ids = torch.zeros(max_bs, dtype=torch.long, device=device)  # [max_bs]
        self.slots = torch.full((max_bs,), scratch_slot, dtype=torch.long, device=device)  # [max_bs]
        self.positions = torch.zeros(max_bs, dtype=torch.long, device=device)  # [max_bs]
        self.valid_rows = torch.zeros(1, dtype=torch.long, device=device)  # [1] real rows of a padded step

    def fill(self, ids, slots, positions, bs: int) -> None:
        """Copy ``n`` rows in and pad rows n..bs to the scratch slot at position 0."""
        n = len(ids)
        self.valid_rows.fill_(n)
        self.ids[:n].copy_(torch.as_tensor(ids), non_blocking=True)
        self.slots[:n].copy_(torch.as_tensor(slots), non_blocking=True)
        self.positions[:n].copy_(torch.as_tensor(positions), non_blocking=True)
        self.ids[n:bs].zero_()
        self.slots[n:bs].fill_(self.scratch)
        self.positions[n:bs].zero_()

    def context(self, pool, bs: int, request_ids=None, mode: str = "static-eager",
                graph_bs: int | None = None, padded: bool = False) -> StepContext:
        """The step context over the first ``bs`` rows (``padded``: with ``valid_rows``)."""
        return StepContext.for_decode(pool, self.slots[:bs], self.positions[:bs], request_ids, mode, graph_bs,
                                      self.valid_rows if padded else None)


def decode_step(model, inputs: StaticInputs, pool, bs: int, mode: str = "static-eager",
                request_ids=None, padded: bool | None = None) -> torch.Tensor:
    """One decode forward on the first ``bs`` static rows: logits [bs, V]. ``padded`` (default: a
    graph step) marks a step padded to ``bs``: under attention-DP its MoE gathers with fixed sizes."""
    graph_bs = bs if mode == "graph" else None
    padded = mode == "graph" if padded is None else padded
    return model(inputs.ids[:bs], inputs.context(pool, bs, request_ids, mode, graph_bs, padded))


class GraphRunner:
    """Captured decode graphs for ``batch_sizes`` over ``pool`` (module docstring); ``capture=False``:
    the same padded steps run without capturing."""

    def __init__(self, model, pool, max_bs: int, batch_sizes=BATCH_SIZES, debug: bool = False,
                 capture: bool = True):
        self.model, self.pool, self.capture_graphs = model, pool, capture
        self.device = next(model.parameters()).device
        if capture and self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need the model on a CUDA device")
        self.batch_sizes = sorted({b for b in batch_sizes if b < max_bs} | {max_bs})
        self.inputs = StaticInputs(max_bs, pool.scratch, self.device)
        self.outputs = torch.zeros(max_bs, model.config.logits_vocab_size, dtype=model.dtype, device=self.device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.debug, self.recording = debug, None
        self.mempool = None

    @property
    def mode(self) -> str:
        """How a step of this runner runs (the probes' ``forward`` meta)."""
        return "graph" if self.capture_graphs else "static-eager"

    def capture(self) -> None:
        """Warm up and capture every batch size, largest first, into one pool (``capture=False``:
        warm up only, planning the in-graph recording's slots)."""
        self._check_same_sizes()
        rec = inkling_probe.sink.active_recorder()
        if rec is not None:
            from inkling_probe.graphs.session import InGraphRecording
            self.recording = InGraphRecording(rec, self.device)
        for bs in reversed(self.batch_sizes):
            self._capture(bs)

    def _check_same_sizes(self) -> None:
        """Under attention-DP every group must capture the same batch sizes (their warm-ups and replays
        run collectives together): ValueError (one line) otherwise, on every rank."""
        dp = self.model.tp.dp_peers
        if dp.size == 1:
            return
        counts = dp.all_gather(torch.tensor([len(self.batch_sizes)], device=self.device), 0).tolist()  # [dp]
        every = counts
        if len(set(counts)) == 1:  # then the lists themselves, element by element (a summary can collide)
            every = dp.all_gather(torch.tensor(self.batch_sizes, device=self.device), 0).view(dp.size, -1).tolist()
            if all(row == every[0] for row in every):
                return
        raise ValueError(f"attention-DP groups would capture different batch sizes ("
                         f"{'sizes' if every is not counts else 'how many'} per group: {every}): give every "
                         "group's runtime the same max_batch and batch_sizes")

    def _capture(self, bs: int) -> None:
        self.inputs.fill([], [], [], bs)  # every row padding (the scratch slot); every DP group alike
        with self._planning(bs):  # warm-up: eager run (tunes auto all-reduce, allocates staging)
            decode_step(self.model, self.inputs, self.pool, bs, "graph")
        if not self.capture_graphs:
            return
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

    def agreed_size(self, n: int) -> int:
        """The batch size this step replays: for ``n`` rows, under attention-DP for the most rows of
        any group (a host all-gather of the counts, before the replay: never inside the graph)."""
        dp = self.model.tp.dp_peers
        return self.graph_size(max(dp.all_gather_sizes(n, self.device)) if dp.size > 1 else n)

    def replay(self, ids, slots, positions, request_ids=None) -> torch.Tensor:
        """Decode ``n`` rows through the graph of the next size up; logits [n, V]. No rows (an idle
        attention-DP group): one padding request (PAD_REQUEST) on the scratch slot; logits [1, V]."""
        if not len(ids):
            ids, slots, positions, request_ids = [0], [self.pool.scratch], [0], [PAD_REQUEST]
        n = len(ids)
        bs = self.agreed_size(n)
        self.inputs.fill(ids, slots, positions, bs)
        recording = self._recording()
        layout = self.step_layout(n, bs, request_ids) if inkling_probe.enabled() else {}
        inkling_probe.step(**layout)  # the replay's step id, and what its rows are
        self._run(bs)
        if recording is not None:
            recording.after_replay(bs, rows=n, layout=layout)
            recording.hand_over()
        return self.outputs[:n]

    def _run(self, bs: int) -> None:
        if self.capture_graphs:
            self.graphs[bs].replay()
            return
        with self._capturing(bs):  # the capture's probe copies into the arena, run eagerly
            self.outputs[:bs] = decode_step(self.model, self.inputs, self.pool, bs, "static-eager", padded=True)

    def step_layout(self, rows: int, bs: int, request_ids=None) -> dict:
        """What this step's recorded rows declare (the model's probe layout: how it ran, and under
        attention-DP its requests), built on the host for the drain: the graph's planned meta is
        the warm-up's, whose rows were padding."""
        ctx = StepContext([1] * rows, None, request_ids, mode=self.mode,
                          graph_bs=bs if self.capture_graphs else None)
        return self.model.probe_layout(ctx)

    def _recording(self):
        """The in-graph recording to drain into, if still active; probes the graphs lack are an error."""
        if self.recording is None:
            if inkling_probe.enabled():
                raise RuntimeError("recording started after the decode graphs were captured without probes: "
                                   "start it before the first decode, or capture again (Runtime.capture(again=True))")
            return None
        return self.recording if self.recording.check_active() else None

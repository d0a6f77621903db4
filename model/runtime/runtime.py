"""The decode runtime: a static KV/conv pool with slots, batched prefill, then decode (eager or graphs).

Prefill runs the prompts in one flattened forward that writes each request's keys, values and conv
states straight into its pool slot; decode steps read and write the pool through static metadata
buffers (the layers' decode branch), eagerly or by replaying CUDA graphs (model/runtime/graphs.py).
Generation is :func:`inkling_model.generate.generation_loop` with this runtime's decode. Under
tensor parallelism every rank runs the same runtime (its pool holds its kv heads); under
attention-DP each group serves its own requests, an idle group decoding a padding row on the scratch
slot; with graphs every group replays the batch size they agreed on (model/runtime/graphs.py).
``capture=False`` runs the graph path's padded steps without capturing (any device). Switches (read
when a runtime is built, unless given): ``INKLING_CUDA_GRAPH=1`` captures the decode step,
``INKLING_ENFORCE_EAGER=1`` keeps the same runtime eager (the reference side of a graph-vs-eager
comparison). Every probe records how its step ran (meta ``forward``: ``eager``
prefill, ``static-eager`` decode, ``graph`` replay with ``graph_bs``: the step context's mode),
which graphdiff checks.
"""

from __future__ import annotations

import torch

from inkling_probe.settings import env_flag
from inkling_model.generate import PAD_REQUEST, Eos, Generation, any_active, generation_loop, prefill
from inkling_model.runtime.graphs import BATCH_SIZES, GraphRunner, StaticInputs, decode_step
from inkling_model.layers.kv_cache import KVPool

CUDA_GRAPH_ENV = "INKLING_CUDA_GRAPH"
ENFORCE_EAGER_ENV = "INKLING_ENFORCE_EAGER"


class Runtime:
    """Up to ``max_batch`` concurrent requests of at most ``max_len`` tokens on ``model``."""

    def __init__(self, model, max_batch: int = 8, max_len: int = 256, cuda_graph: bool | None = None,
                 enforce_eager: bool | None = None, batch_sizes=BATCH_SIZES, debug_graphs: bool = False,
                 capture: bool = True):
        """``capture`` False (with graphs on): the graph path's padded static steps, run without
        capturing a CUDA graph (``static-eager``, any device; module docstring)."""
        self.model, self.max_len = model, max_len
        self.cuda_graph = env_flag(CUDA_GRAPH_ENV) if cuda_graph is None else cuda_graph
        self.enforce_eager = env_flag(ENFORCE_EAGER_ENV) if enforce_eager is None else enforce_eager
        device = next(model.parameters()).device
        if self.cuda_graph and capture and device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.pool = KVPool(model, max_batch, max_len, device)
        self.inputs = StaticInputs(max_batch, self.pool.scratch, device)
        self.requests = {}  # slot -> RequestCache
        self.runner: GraphRunner | None = None
        self._graph_args = (max_batch, batch_sizes, debug_graphs, capture)

    @property
    def graphs_on(self) -> bool:
        return self.cuda_graph and not self.enforce_eager

    @property
    def lengths(self) -> dict[int, int]:
        """Tokens held by each slot in use."""
        return {s: c.length for s, c in self.requests.items()}

    def capture(self, again: bool = False) -> GraphRunner:
        """Capture the decode graphs now (else on the first decode), with probes if recording is on.

        ``again``: recapture (e.g. after recording was switched on or changed).
        """
        if self.runner is None or again:
            max_bs, sizes, debug, capture = self._graph_args
            self.runner = GraphRunner(self.model, self.pool, max_bs, sizes, debug, capture)
            self.runner.capture()
        return self.runner

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]], request_ids: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
        """Prefill every prompt in one forward into fresh slots; returns the slots and last logits [R, V]
        (attention-DP: no prompts runs a padding forward; no logits)."""
        if any(not 0 < len(p) < self.max_len for p in prompts):
            raise ValueError(f"every prompt needs 1 to {self.max_len - 1} tokens")
        if len(prompts) > len(self.pool.free):
            raise RuntimeError(f"KV pool full: {len(prompts)} prompts for {len(self.pool.free)} free slots")
        caches = [self.pool.new_request() for _ in prompts]
        self.requests.update({c.slot: c for c in caches})
        logits = prefill(self.model, prompts, request_ids, caches, last_only=True)
        return [c.slot for c in caches], logits

    @torch.no_grad()
    def decode(self, tokens: list[int], slots: list[int], request_ids: list[int] | None = None) -> torch.Tensor:
        """One decode step: ``tokens[i]`` appended to request ``slots[i]``; logits [n, V].
        No slots (an idle attention-DP group): a padding row on the scratch slot, no logits."""
        if not slots and self.graphs_on:
            self.capture().replay([], [], [])  # a padding request, the batch size the groups agreed on
            return None
        if not slots:
            self.inputs.fill([0], [self.pool.scratch], [0], 1)
            decode_step(self.model, self.inputs, self.pool, 1, request_ids=[PAD_REQUEST])
            return None
        caches = [self.requests[s] for s in slots]
        positions = [c.length for c in caches]
        if max(positions) >= self.max_len:
            raise ValueError(f"a request reached the pool's max_len {self.max_len}")
        if self.graphs_on:
            logits = self.capture().replay(tokens, slots, positions, request_ids)
        else:
            n = len(tokens)
            self.inputs.fill(tokens, slots, positions, n)
            logits = decode_step(self.model, self.inputs, self.pool, n, request_ids=request_ids)
        for c in caches:
            c.length += 1
        return logits

    def release(self, slot: int) -> None:
        self.requests.pop(slot, None)
        self.pool.release(slot)

    def generate(self, prompts: list[list[int]], max_new_tokens: int, eos: Eos | None = None,
                 temperature: float = 0.0, top_k: int | None = None, seed: int = 0,
                 request_ids: list[int] | None = None, on_step=None) -> list[Generation]:
        """As :func:`inkling_model.generate.generate`, with decode through the pool (and graphs)."""
        ids_of = list(request_ids) if request_ids is not None else list(range(len(prompts)))
        slots: list[int] = []

        def first():
            new, logits = self.prefill(prompts, ids_of)
            slots.extend(new)
            return logits

        def step(active, tokens):
            return self.decode(tokens, [slots[r] for r in active], [ids_of[r] for r in active])

        try:
            return generation_loop(first, step, len(prompts), max_new_tokens, eos, temperature, top_k, seed,
                                   on_step, lambda a: any_active(self.model, a))
        finally:
            for s in slots:
                self.release(s)

"""The decode runtime: a static KV/conv pool with slots, batched prefill, then decode (eager or graphs).

Prefill runs today's forward on the prompts (one flattened batch, growing caches) and copies each
request's cache into its pool slot; decode steps read and write the pool through static metadata
buffers, eagerly or by replaying CUDA graphs (model/runtime/graphs.py). Switches (read when a runtime is
built, unless given): ``INKLING_CUDA_GRAPH=1`` captures the decode step, ``INKLING_ENFORCE_EAGER=1``
keeps the same runtime eager (the reference side of a graph-vs-eager comparison). Every probe records
how its step ran (meta ``forward``: ``eager`` prefill, ``static-eager`` decode, ``graph`` replay with
``graph_bs``), which graphdiff checks.
"""

from __future__ import annotations

import torch

from inkling_probe.settings import env_flag
from inkling_model.generate import Eos, Generation, _pick, take_tokens
from inkling_model.runtime.graphs import BATCH_SIZES, STATIC_EAGER, GraphRunner, StaticInputs, decode_step
from inkling_model.runtime.kv_pool import KVPool
from inkling_model.layers.context import ForwardContext

CUDA_GRAPH_ENV = "INKLING_CUDA_GRAPH"
ENFORCE_EAGER_ENV = "INKLING_ENFORCE_EAGER"


def check_model(model) -> None:
    """Refuse (ValueError, one line) what the static decode path does not support."""
    if model.tp.dp_size != 1:
        raise ValueError("the decode runtime does not support attention-DP (dp_size > 1)")
    quant = [i for i in range(model.config.num_hidden_layers) if model.config.expert_quant(i)]
    if quant:
        raise ValueError(f"the decode runtime needs bf16/fp32 routed experts; layers {quant[:3]}... are NVFP4")


class Runtime:
    """Up to ``max_batch`` concurrent requests of at most ``max_len`` tokens on ``model``."""

    def __init__(self, model, max_batch: int = 8, max_len: int = 256, cuda_graph: bool | None = None,
                 enforce_eager: bool | None = None, batch_sizes=BATCH_SIZES, debug_graphs: bool = False):
        check_model(model)
        self.model, self.max_len = model, max_len
        self.cuda_graph = env_flag(CUDA_GRAPH_ENV) if cuda_graph is None else cuda_graph
        self.enforce_eager = env_flag(ENFORCE_EAGER_ENV) if enforce_eager is None else enforce_eager
        device = next(model.parameters()).device
        if self.cuda_graph and device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.pool = KVPool(model, max_batch, max_len, device)
        self.inputs = StaticInputs(max_batch, self.pool.scratch, device)
        self.lengths: dict[int, int] = {}
        self.runner: GraphRunner | None = None
        self._graph_args = (max_batch, batch_sizes, debug_graphs)

    @property
    def graphs_on(self) -> bool:
        return self.cuda_graph and not self.enforce_eager

    def capture(self, again: bool = False) -> GraphRunner:
        """Capture the decode graphs now (else on the first decode), with probes if recording is on.

        ``again``: recapture (e.g. after recording was switched on or changed).
        """
        if self.runner is None or again:
            max_bs, sizes, debug = self._graph_args
            self.runner = GraphRunner(self.model, self.pool, max_bs, sizes, debug)
            self.runner.capture()
        return self.runner

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]]) -> tuple[list[int], torch.Tensor]:
        """Prefill every prompt in one forward; returns their slots and last logits [R, V]."""
        if any(not 0 < len(p) < self.max_len for p in prompts):
            raise ValueError(f"every prompt needs 1 to {self.max_len - 1} tokens")
        device = self.inputs.ids.device
        caches = [self.model.new_cache() for _ in prompts]
        ids = torch.tensor([t for p in prompts for t in p], device=device)
        logits = self.model(ids, ForwardContext([len(p) for p in prompts], caches), last_only=True)
        slots = []
        for p, cache in zip(prompts, caches):
            slot = self.pool.allocate()
            self.pool.load(slot, cache)
            self.lengths[slot] = len(p)
            slots.append(slot)
        return slots, logits

    @torch.no_grad()
    def decode(self, tokens: list[int], slots: list[int]) -> torch.Tensor:
        """One decode step: ``tokens[i]`` appended to request ``slots[i]``; logits [n, V]."""
        positions = [self.lengths[s] for s in slots]
        if max(positions) >= self.max_len:
            raise ValueError(f"a request reached the pool's max_len {self.max_len}")
        if self.graphs_on:
            logits = self.capture().replay(tokens, slots, positions)
        else:
            n = len(tokens)
            self.inputs.fill(tokens, slots, positions, n)
            logits = decode_step(self.model, self.inputs, self.pool, n, STATIC_EAGER)
        for s in slots:
            self.lengths[s] += 1
        return logits

    def release(self, slot: int) -> None:
        self.lengths.pop(slot, None)
        self.pool.release(slot)

    def generate(self, prompts: list[list[int]], max_new_tokens: int, eos: Eos | None = None,
                 temperature: float = 0.0, top_k: int | None = None, seed: int = 0) -> list[Generation]:
        """As :func:`inkling_model.generate.generate`, with decode through the pool (and graphs)."""
        eos = eos if eos is not None else Eos(None)
        gen = torch.Generator().manual_seed(seed) if temperature else None
        results = [Generation() for _ in prompts]
        slots, logits = self.prefill(prompts) if max_new_tokens else ([], None)
        active = list(range(len(prompts)))
        for _ in range(max_new_tokens):
            nxt = _pick(logits.float().cpu(), temperature, top_k, gen).tolist()  # [R]
            active = take_tokens(results, active, nxt, eos, max_new_tokens)
            if not active:
                break
            logits = self.decode([results[r].tokens[-1] for r in active], [slots[r] for r in active])
        for s in slots:
            self.release(s)
        return results

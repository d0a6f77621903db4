"""InklingForCausalLM: the tensor-parallel Inkling text decoder.

``embed -> embed_norm -> layers -> norm -> unembed(norm(h) / logits_mup_width_multiplier)``, logits
cut to the used vocabulary rows. Parameter names are the native checkpoint's with ``model.llm.``
removed (``embed.weight``, ``layers.3.attn.wq_du.weight``, ``layers.3.mlp.experts.w13_weight``, ...);
each parameter's ``weight_loader(param, full_tensor)`` takes this rank's shard of the full tensor.
Build on the meta device for shapes only: ``with torch.device("meta"): InklingForCausalLM(cfg)``.
"""

from __future__ import annotations

import contextlib
from typing import Iterable

import torch
from torch import nn

import inkling_probe
from inkling_model.config import InklingConfig
from inkling_model.layers.context import RequestCache, StepContext
from inkling_model.layers.decoder import DecoderLayer
from inkling_model.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from inkling_model.layers.loading import replicated_loader
from inkling_model.layers.norm import RMSNorm
from inkling_model.parallel import Parallel
from inkling_model.layers.kv_cache import KVPool


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


class InklingForCausalLM(nn.Module):
    """The text decoder with its head. ``tp`` (default: one process) gives the process groups.

    Parameters are created uninitialised in ``dtype`` (short convs, router bias and router
    global_scale in fp32, as transformers keeps them); load them with :meth:`load_weights`.
    """

    def __init__(self, config: InklingConfig, tp: Parallel | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config, self.tp, self.dtype = config, tp or Parallel(), dtype
        check_parallel(config, self.tp.attn.size, self.tp.moe.size, self.tp.expert_parallel)
        g, h = self.tp.attn, config.hidden_size
        with _default_dtype(dtype):
            self.embed = VocabParallelEmbedding(config.vocab_size, h, g)
            self.embed_norm = RMSNorm(h, config.rms_norm_eps)
            self.layers = nn.ModuleList([DecoderLayer(config, i, self.tp) for i in range(config.num_hidden_layers)])
            self.norm = RMSNorm(h, config.rms_norm_eps)
            self.unembed = ParallelLMHead(config.vocab_size, h, g)

    def new_cache(self, max_len: int | None = None) -> RequestCache:
        """An empty cache for one request: a slot of a one-slot KV pool of ``max_len`` positions
        (default the config's max_position_embeddings). Several requests: one ``KVPool``, a slot each."""
        return KVPool(self, 1, max_len or self.config.max_position_embeddings).new_request()

    def forward(self, input_ids: torch.Tensor, ctx: StepContext | None = None,
                last_only: bool = False, fuse=None) -> torch.Tensor:
        """Logits [T, V] for the flattened tokens ``input_ids [T]`` of ``ctx``'s requests.

        ``last_only``: only each request's last token ([num_requests, V]), as decode needs.
        ``fuse``: ``h [T, H] -> h`` applied to the normed embeddings before the layers (multimodal
        fusion, inkling_model.multimodal).
        Advances the requests' caches past these tokens.
        """
        ctx = ctx or StepContext.single(input_ids.shape[0])
        inkling_probe.step(**self.probe_layout(ctx))
        if input_ids.dim() != 1 or input_ids.shape[0] != ctx.num_tokens:
            raise ValueError(f"input_ids must be [T] with T = {ctx.num_tokens}, got {tuple(input_ids.shape)}")
        h = self.embed_norm(self.embed(input_ids))  # [T, H]
        inkling_probe.probe("embed", h)
        if fuse is not None:
            h = fuse(h)  # [T, H] media rows scattered in, same step
        for layer in self.layers:
            h = layer(h, ctx)
        h = self.norm(h)
        inkling_probe.probe("norm", h)
        if last_only and inkling_probe.enabled():  # the probe sees every token; the output path is unchanged
            inkling_probe.probe("logits", self._logits(h))
        if last_only:
            h = h[torch.tensor(ctx.seq_lens, device=h.device).cumsum(0) - 1]  # [R, H]
        logits = self._logits(h)  # [T or R, V]
        if not last_only:
            inkling_probe.probe("logits", logits)
        ctx.advance()
        return logits

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """The head: ``[n, H] -> [n, V]`` (muP width multiplier, padded rows cut)."""
        logits = self.unembed(h / self.config.logits_mup_width_multiplier)  # [n, V_padded]
        return logits[:, : self.config.logits_vocab_size]

    def probe_layout(self, ctx: StepContext) -> dict:
        """What every probe of this forward declares: how the step runs (``forward``: the context's
        mode, eager, static-eager or graph with ``graph_bs``) and the DP layout under attention-DP."""
        meta = ctx.step_meta
        if self.tp.dp_size == 1:
            return meta
        ids = ctx.request_ids
        return {**meta, "dp_rank": self.tp.dp_peers.rank, "dp_size": self.tp.dp_size,
                "requests": None if ids is None else [[i, n] for i, n in zip(ids, ctx.seq_lens)]}

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], strict: bool = True) -> set[str]:
        """Load (name, FULL tensor) pairs through each parameter's weight_loader; returns the names.

        ``strict``: every parameter must be loaded and every name must exist.
        """
        params = dict(self.named_parameters())
        loaded = set()
        for name, full in weights:
            if name not in params:
                if strict:
                    raise KeyError(f"checkpoint tensor {name!r} has no parameter in the model")
                continue
            param = params[name]
            getattr(param, "weight_loader", replicated_loader)(param, full)
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if strict and missing:
            raise KeyError(f"{len(missing)} parameters not loaded, e.g. {missing[:3]}")
        return loaded


def check_parallel(config: InklingConfig, attn_size: int, moe_size: int, expert_parallel: bool = False) -> None:
    """Raise ValueError (one line) unless every sharded size divides over its group."""
    sizes = {}
    for i in sorted({config.layer_types.index(kind) for kind in config.layer_types}):
        heads, kv_heads, _, _, _ = config.attn_dims(i)
        kind = "sliding" if config.is_sliding(i) else "full"
        sizes[f"{kind}-attention heads"] = (heads, attn_size)
        sizes[f"{kind}-attention kv heads"] = (kv_heads, attn_size)
    sizes.update({"vocab_size": (config.vocab_size, attn_size),
                  "intermediate_size": (config.intermediate_size, attn_size),
                  "moe_intermediate_size (shared experts)": (config.moe_intermediate_size, attn_size)})
    if expert_parallel:
        sizes["n_routed_experts"] = (config.n_routed_experts, moe_size)
    else:
        sizes["moe_intermediate_size (routed experts)"] = (config.moe_intermediate_size, moe_size)
    for what, (n, d) in sizes.items():
        if n % d:
            group = "attention group" if d == attn_size else "expert group"
            raise ValueError(f"{what} = {n} does not divide over an {group} of {d} ranks")


def probe_points(config: InklingConfig, scores_bias: bool = True) -> list[str]:
    """The canonical probe keys one forward of ``config`` records, in execution order.

    Also recorded, not canonical: ``layers.N.mlp.shared_gammas`` (the router's shared-expert weights).
    ``scores_bias`` is recorded only when a forward holds a single request.
    """
    keys = ["embed"]
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}"
        attn = [f"{p}.attn.{k}" for k in ("q", "k", "v", "r")]
        attn += [f"{p}.attn.scores_bias"] if scores_bias else []
        keys += [f"{p}.attn_norm", *attn, f"{p}.attn.out", f"{p}.attn.o_proj", f"{p}.attn_sconv",
                 f"{p}.resid_attn", f"{p}.mlp_norm"]
        if config.is_moe(i):
            keys += [f"{p}.mlp.{k}" for k in ("router_logits", "topk_idx", "topk_w", "experts", "shared")]
        keys += [f"{p}.mlp.out", f"{p}.mlp_sconv", f"{p}.resid"]
    return keys + ["norm", "logits"]

"""Generation: prefill every request in one forward, then decode them together; the one generation
loop (:func:`generation_loop`), whatever runs the forwards (this module's :func:`generate`, the
runtime, transformers' Inkling in ``run --impl hf``).

End-of-sequence is resolved once (:func:`resolve_eos`), in this order: an explicit setting, the
tokenizer's ``eos_token_id``, the checkpoint's generation_config.json, config.json's
``eos_token_id``. A list means: the first id ends the sequence, the rest are stop ids (duplicates
dropped). When none is found generation runs to ``max_new_tokens`` and a warning says so (the
bring-up bug: a generation that never stopped because the end id lived only in config.json).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from inkling_model.switches import faults, forced_tokens
from inkling_model.layers.context import RequestCache, StepContext
from inkling_model.layers.kv_cache import KVPool

PAD_REQUEST = -1  # the request id of an idle attention-DP group's one-token padding forward


@dataclass(frozen=True)
class Eos:
    """The resolved end-of-sequence: ``end_id`` (None: none found), extra ``stop_ids``, and where from."""

    end_id: int | None
    stop_ids: tuple[int, ...] = ()
    source: str = "none"

    @property
    def ids(self) -> frozenset[int]:
        """Every id that finishes a sequence."""
        return frozenset(([] if self.end_id is None else [self.end_id]) + list(self.stop_ids))


def _as_eos(value, source: str) -> Eos | None:
    if value is None or value == []:
        return None
    ids = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    unique = list(dict.fromkeys(ids))
    return Eos(unique[0], tuple(unique[1:]), source)


def _json_eos(path: Path):
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("eos_token_id")


def resolve_eos(explicit=None, tokenizer=None, ckpt_dir=None, config=None) -> Eos:
    """End-of-sequence from the first source that has one (module docstring); warns when none does."""
    candidates = [(explicit, "explicit setting"),
                  (getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None, "tokenizer")]
    if ckpt_dir is not None:
        candidates.append((_json_eos(Path(ckpt_dir) / "generation_config.json"), "generation_config.json"))
        candidates.append((_json_eos(Path(ckpt_dir) / "config.json"), "config.json"))
    elif config is not None:
        candidates.append((config.eos_token_id, "config.json"))
    if faults.is_active("no_config_eos"):  # planted: the config.json fallback switched off
        candidates = [c for c in candidates if c[1] != "config.json"]
    for value, source in candidates:
        eos = _as_eos(value, source)
        if eos is not None:
            return eos
    warnings.warn("no end-of-sequence id found (explicit, tokenizer, generation_config.json, config.json): "
                  "generation runs to max_new_tokens", stacklevel=2)
    return Eos(None)


@dataclass
class Generation:
    """One request's result: the new tokens (the finishing id included) and why it stopped."""

    tokens: list[int] = field(default_factory=list)
    finish_reason: str = "length"  # "eos" (end id), "stop" (a stop id) or "length"


def pick_tokens(logits: torch.Tensor, temperature: float, top_k: int | None,
                gen: torch.Generator | None) -> torch.Tensor:
    """The next token of each row of ``logits [R, V]``: argmax (``temperature`` 0), else sampled
    (``top_k``: among the k largest) with ``gen`` (a CPU generator). -> [R] on the CPU."""
    logits = logits.float().cpu()
    if temperature == 0:
        return logits.argmax(-1)  # [R]
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # [R, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]  # [R]


_pick = pick_tokens  # the old private name


def take_tokens(results: list[Generation], active: list[int], tokens: list[int], eos: Eos,
                max_new_tokens: int) -> list[int]:
    """Append each active request's new token; returns the requests still generating."""
    still = []
    for r, tok in zip(active, tokens):
        results[r].tokens.append(tok)
        if tok in eos.ids:
            results[r].finish_reason = "eos" if tok == eos.end_id else "stop"
        else:
            still.append(r)
    return [r for r in still if len(results[r].tokens) < max_new_tokens]


def generation_loop(prefill, decode, num_requests: int, max_new_tokens: int, eos: Eos | None = None,
                    temperature: float = 0.0, top_k: int | None = None, seed: int = 0, on_step=None,
                    any_active=bool) -> list[Generation]:
    """The one generation loop, whatever runs the forwards.

    ``prefill() -> logits [R, V]`` of each request's last prompt token (None: nothing of this rank's);
    ``decode(active, tokens) -> logits [len(active), V]``: one token appended to each of the requests
    ``active`` (an empty list: a padding step, None back). ``on_step(i, logits [V])`` sees the logits
    each token of request i is picked from; ``any_active(active)`` whether any request of any
    attention-DP group still decodes (default: this rank's). Nothing runs for ``max_new_tokens`` 0.
    Under ``INKLING_FORCE_TOKENS`` (``run --force-tokens``) each request takes the reference's token
    instead of its own pick, which is kept as a decision where it differs (switches/forced_tokens.py).
    """
    eos = eos if eos is not None else Eos(None)
    forced = forced_tokens.active()
    gen = torch.Generator().manual_seed(seed) if temperature else None
    results = [Generation() for _ in range(num_requests)]
    active = list(range(num_requests))
    if max_new_tokens == 0:
        return results
    logits = prefill()
    while True:
        if active:
            nxt = pick_tokens(logits, temperature, top_k, gen).tolist()  # [R]
            if forced is not None:  # teacher-forced: the reference's tokens, the own picks noted where they differ
                nxt = [forced.take(r, len(results[r].tokens), logits[row], t) for row, (r, t) in enumerate(zip(active, nxt))]
            if on_step is not None:
                for row, r in enumerate(active):
                    on_step(r, logits[row])
            active = take_tokens(results, active, nxt, eos, max_new_tokens)
        if not any_active(active):
            return results
        logits = decode(active, [results[r].tokens[-1] for r in active])


def _pad_forward(model, pool=None) -> None:
    """One token of a throwaway request: an idle attention-DP group keeps the collectives in step.
    With ``pool``: a decode step on its scratch slot (the decode branch, as the other groups run)."""
    device = next(model.parameters()).device
    ids = torch.zeros(1, dtype=torch.long, device=device)
    if pool is None:
        model(ids, StepContext([1], None, [PAD_REQUEST]), last_only=True)
    else:
        zero = torch.zeros(1, dtype=torch.long, device=pool.device)
        model(ids, StepContext.for_decode(pool, zero + pool.scratch, zero, [PAD_REQUEST], mode="eager"))


def any_active(model, active: list[int]) -> bool:
    """Whether any request is still decoding: this rank's, or under attention-DP any group's."""
    if model.tp.dp_size == 1:
        return bool(active)
    n = model.tp.world.all_reduce(torch.tensor([len(active)], device=next(model.parameters()).device))
    return int(n.item()) > 0  # between steps, never inside a captured one


@torch.no_grad()
def prefill(model, prompts: list[list[int]], request_ids: list[int] | None = None,
            caches: list[RequestCache] | None = None, last_only: bool = False) -> torch.Tensor | None:
    """One forward over every prompt (attention-DP: this group's, a padding request when it has none),
    writing into ``caches`` if given; returns the logits [T, V] ([R, V] with ``last_only``; None for
    padding)."""
    if not prompts:
        _pad_forward(model)
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([t for p in prompts for t in p], device=device)
    return model(ids, StepContext([len(p) for p in prompts], caches, request_ids), last_only=last_only)


@torch.no_grad()
def generate(model, prompts: list[list[int]], max_new_tokens: int, eos: Eos | None = None,
             temperature: float = 0.0, top_k: int | None = None, seed: int = 0,
             request_ids: list[int] | None = None, on_step=None) -> list[Generation]:
    """Greedy (``temperature=0``) or sampled decode of every prompt; ``eos`` from :func:`resolve_eos`.

    Prefill writes each prompt into a slot of one KV pool, then every step decodes one token per
    active request through the layers' decode branch (the one the runtime runs, eagerly or in graphs).
    Under tensor parallelism every rank calls this with the same prompts and seed and gets the same
    tokens (logits are replicated; sampling uses a generator seeded identically on every rank).
    Under attention-DP each group passes its own prompts (possibly none) and their global
    ``request_ids``; the groups step together, an idle one running a padding request. Sampled tokens
    then differ from a DP=1 run (each group draws from its own generator); greedy ones don't.
    ``on_step(i, logits [V])`` sees the logits each step's token of prompt i is picked from.
    """
    if (not prompts and model.tp.dp_size == 1) or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    device = next(model.parameters()).device
    ids_of = list(request_ids) if request_ids is not None else list(range(len(prompts)))
    max_len = max([len(p) for p in prompts], default=0) + max_new_tokens
    pool = KVPool(model, max(len(prompts), 1), max(max_len, 1), device)
    caches = [pool.new_request() for _ in prompts]

    def decode(active, tokens):
        if not active:
            return _pad_forward(model, pool)
        ids = torch.tensor(tokens, device=device)
        return model(ids, StepContext([1] * len(active), [caches[r] for r in active], [ids_of[r] for r in active]))

    return generation_loop(lambda: prefill(model, prompts, ids_of, caches, last_only=True), decode, len(prompts),
                           max_new_tokens, eos, temperature, top_k, seed, on_step, lambda a: any_active(model, a))

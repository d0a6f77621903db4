"""Eager generation: prefill every request in one forward, then decode them together with the cache.

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

from inkling_model.plugins import faults
from inkling_model.layers.context import ForwardContext

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


def _pick(logits: torch.Tensor, temperature: float, top_k: int | None, gen: torch.Generator | None) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(-1)  # [R]
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # [R, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]  # [R]


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


def _pad_forward(model) -> None:
    """One token of a throwaway request: an idle attention-DP group keeps the collectives in step."""
    model(torch.zeros(1, dtype=torch.long, device=next(model.parameters()).device),
          ForwardContext([1], [model.new_cache()], [PAD_REQUEST]), last_only=True)


def _any_active(model, active: list[int]) -> bool:
    """Whether any request is still decoding: this rank's, or under attention-DP any group's."""
    if model.tp.dp_size == 1:
        return bool(active)
    n = model.tp.world.all_reduce(torch.tensor([len(active)]))
    return int(n.item()) > 0


@torch.no_grad()
def prefill(model, prompts: list[list[int]], request_ids: list[int] | None = None) -> torch.Tensor | None:
    """One forward over every prompt (attention-DP: this group's, a padding request when it has none);
    returns the logits [T, V] (None for padding)."""
    if not prompts:
        _pad_forward(model)
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([t for p in prompts for t in p], device=device)
    return model(ids, ForwardContext([len(p) for p in prompts], None, request_ids))


@torch.no_grad()
def generate(model, prompts: list[list[int]], max_new_tokens: int, eos: Eos | None = None,
             temperature: float = 0.0, top_k: int | None = None, seed: int = 0,
             request_ids: list[int] | None = None, on_step=None) -> list[Generation]:
    """Greedy (``temperature=0``) or sampled decode of every prompt; ``eos`` from :func:`resolve_eos`.

    Under tensor parallelism every rank calls this with the same prompts and seed and gets the same
    tokens (logits are replicated; sampling uses a generator seeded identically on every rank).
    Under attention-DP each group passes its own prompts (possibly none) and their global
    ``request_ids``; the groups step together, an idle one running a padding request. Sampled tokens
    then differ from a DP=1 run (each group draws from its own generator); greedy ones don't.
    ``on_step(i, logits [V])`` sees the logits each step's token of prompt i is picked from.
    """
    if (not prompts and model.tp.dp_size == 1) or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    eos = eos if eos is not None else Eos(None)
    gen = torch.Generator().manual_seed(seed) if temperature else None
    device = next(model.parameters()).device
    ids_of = list(request_ids) if request_ids is not None else list(range(len(prompts)))
    results = [Generation() for _ in prompts]
    caches = [model.new_cache() for _ in prompts]
    active = list(range(len(prompts)))
    ids = torch.tensor([t for p in prompts for t in p], device=device)
    ctx = ForwardContext([len(p) for p in prompts], caches, ids_of)
    for _ in range(max_new_tokens):
        if active:
            logits = model(ids, ctx, last_only=True)  # [R, V]
            nxt = _pick(logits, temperature, top_k, gen).tolist()  # [R]
            if on_step is not None:
                for row, r in enumerate(active):
                    on_step(r, logits[row])
            active = take_tokens(results, active, nxt, eos, max_new_tokens)
        else:
            _pad_forward(model)
        if not _any_active(model, active):
            break
        ids = torch.tensor([results[r].tokens[-1] for r in active], device=device)
        ctx = ForwardContext([1] * len(active), [caches[r] for r in active], [ids_of[r] for r in active])
    return results


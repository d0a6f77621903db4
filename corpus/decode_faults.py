"""Decode-only faults and the benign pairs of the decode families (issue 41; recorded by :mod:`.decode`).

Each fault runs only on decode forwards (every forward after the prefill, step 0), as a bug in a
decode kernel or the KV-cache path does; the prefill is exact. Its truth is the key where it is born
and the decode step where it first changes a value (:attr:`Case.step`):

- ``decode_rope_pos+1``: the rotary table at decode is computed for position + 1 (a cache position
  off by one): born in ``model.rotary_emb``'s output at step 1;
- ``decode_cache_slot_back``: every layer writes the new token's K/V one slot early, over the
  previous token's, and reads its own slot unwritten (zeros; a static-cache index off by one): born
  inside layer 0's attention (``self_attn.0`` / ``o_proj.in.0``) at step 1;
- ``decode_window_48``: layer 2, a full-attention layer, attends to the newest 48 keys only at decode
  (a sliding-window layer table off by one; the prefill's mask is right): born in its attention at
  step 1, which drops the oldest 17 of 65 keys;
- ``decode_softmax_scale_x1.2``: layer 1's attention scale x1.2 at decode: born at step 1;
- ``decode_o_proj_x1.1_from_12``: layer 2's o_proj x1.1 from step 12 on (a split-KV decode kernel
  taken once the cache is long enough);
- MoE families: ``decode_experts_x1.2``: layer 2's routed experts x1.2 at decode (a small-batch
  expert kernel): born in ``mlp.experts`` at step 1.

Benign pairs (regimes.py): sdpa vs eager, the prompt as row 0 of a batch of 2 (the other row a
shorter prompt, left-padded), bf16 vs fp32.
"""
from __future__ import annotations

import torch

from inkling_corpus import plant
from inkling_corpus.case import Case
from inkling_corpus.decode import TOKENS
from inkling_corpus.hf import Family, Mod
from inkling_corpus.regimes import benign_case, fault_case

L = "model.layers"
WINDOW = TOKENS - 16  # keys the faulty window keeps at decode
RATIO, OPAQUE = ("ratio",), ("input", "weight", "kernel")


def attn_core(layer: int) -> tuple:
    """A bug inside attention (scale, mask, cache) has no module output of its own."""
    return (f"{L}.{layer}.self_attn.0", f"{L}.{layer}.self_attn.o_proj.in.0")


def at_decode(path: str, wrong):
    """``path``'s forward is ``wrong(module, forward, *args, **kwargs)`` on every call after its first
    (the prefill). Recorded inputs stay the true ones: hooks run outside the forward."""
    def plant_(model):
        module = model.get_submodule(path)
        inner, calls = module.forward, [0]

        def forward(*args, **kwargs):
            calls[0] += 1
            return inner(*args, **kwargs) if calls[0] == 1 else wrong(module, inner, *args, **kwargs)
        module.forward = forward
    return plant_


def _position_plus_one(module, forward, x, position_ids):
    return forward(x, position_ids + 1)  # position_ids: [B, 1]


class _SlotBack:
    """A KV cache whose update writes the new token one slot early and leaves its own slot zero."""

    def __init__(self, cache):
        self._cache = cache

    def __getattr__(self, name):
        return getattr(self._cache, name)

    def update(self, key, value, *args, **kwargs):
        keys, values = self._cache.update(key, value, *args, **kwargs)  # [B, kv_heads, S, D], stored
        for t in (keys, values):  # edited in place: later steps read the stored slots
            t[:, :, -2] = t[:, :, -1]
            t[:, :, -1] = 0
        return keys, values


def _slot_back(module, forward, *args, cache=None, **kwargs):
    return forward(*args, cache=_SlotBack(cache), **kwargs)


def _cache_slot_back(model):
    for i in range(model.config.num_hidden_layers):
        at_decode(f"{L}.{i}.self_attn", _slot_back)(model)


def _window(module, forward, *args, attention_mask=None, **kwargs):
    if attention_mask is None:
        raise ValueError("decode_window: the layer got no attention mask (eager attention builds one)")
    kv = attention_mask.shape[-1]  # [B, 1, 1, kv] at decode
    if kv > WINDOW:
        attention_mask = attention_mask.clone()
        attention_mask[..., :kv - WINDOW] = torch.finfo(attention_mask.dtype).min
    return forward(*args, attention_mask=attention_mask, **kwargs)


def _scaled(factor: float):
    def wrong(module, forward, *args, **kwargs):
        old = module.scaling
        module.scaling = old * factor
        try:
            return forward(*args, **kwargs)
        finally:
            module.scaling = old
    return wrong


def mods(moe: bool) -> list[Mod]:
    out = [
        Mod("decode_rope_pos+1", at_decode("model.rotary_emb", _position_plus_one),
            ("model.rotary_emb.0", "model.rotary_emb.1"), OPAQUE, step=1,
            note="the decode rotary table computed at position + 1 (a cache position off by one)"),
        Mod("decode_cache_slot_back", _cache_slot_back, attn_core(0), OPAQUE, step=1,
            note="every layer writes the new K/V one slot early, over the previous token's (its own slot zero)"),
        Mod(f"decode_window_{WINDOW}", at_decode(f"{L}.2.self_attn", _window), attn_core(2), OPAQUE, step=1,
            note=f"a full-attention layer attends to the newest {WINDOW} keys only at decode (a sliding window)"),
        Mod("decode_softmax_scale_x1.2", at_decode(f"{L}.1.self_attn", _scaled(1.2)), attn_core(1), OPAQUE,
            step=1, note="layer 1's attention scale x1.2 at decode only"),
        Mod("decode_o_proj_x1.1_from_12", plant.from_call(f"{L}.2.self_attn.o_proj", 12, lambda t: t * 1.1),
            (f"{L}.2.self_attn.o_proj",), RATIO, step=12, note="layer 2's o_proj x1.1 from decode step 12 on"),
    ]
    if moe:
        out.append(Mod("decode_experts_x1.2", plant.from_call(f"{L}.2.mlp.experts", 1, lambda t: t * 1.2),
                       (f"{L}.2.mlp.experts",), RATIO, step=1,
                       note="layer 2's routed experts x1.2 at decode only (a small-batch expert kernel)"))
    return out


def family(name: str, make_config, model_cls, moe: bool) -> Family:
    return Family(name, make_config, model_cls, {m.name: m for m in mods(moe)}, tokens=TOKENS)


BENIGN = [
    ("sdpa_vs_eager", {"attn": "sdpa"}, "sdpa attention kernel vs eager, through generate"),
    ("batch2_row0", {"batch": 2, "row": 0},
     "the prompt as row 0 of a batch of 2 beside a shorter left-padded prompt (whole batch recorded)"),
    ("bf16_vs_fp32", {"dtype": "bf16"}, "bf16 run of the fp32 reference's weights, through generate"),
]


def cases(fam: Family) -> list[Case]:
    return ([fault_case(fam, m) for m in fam.mods.values()]
            + [benign_case(fam.name, name, settings, note) for name, settings, note in BENIGN])

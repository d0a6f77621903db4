"""The one KV cache: static KV (full and sliding-window layers) and short-conv state, by slot.

Allocated once, indexed by slot (one slot per request; the last slot is scratch, the target of
padded graph rows and of an idle attention-DP group's padding steps). Full-attention layers keep
``max_len`` positions per slot (position p at index p); sliding layers keep a ring of ``window``
positions (position p at index p % window), so a query at p sees keys p-window+1..p as
transformers' sliding attention does. Conv states keep the last kernel-1 fp32 inputs of each of a
layer's four short convs. Prefill and decode both write here (layers/attention.py, layers/conv.py).
"""

from __future__ import annotations

import torch

from inkling_model.layers.context import RequestCache


class KVPool:
    """KV and conv-state tensors for ``num_slots`` requests (+1 scratch slot) of ``model``."""

    def __init__(self, model, num_slots: int, max_len: int, device=None):
        device = device or next(model.parameters()).device
        self.device = torch.device(device)
        self.num_slots, self.max_len, self.scratch = num_slots, max_len, num_slots
        self.k, self.v, self.window = {}, {}, {}
        self.conv: dict[tuple[int, str], torch.Tensor] = {}
        for layer in model.layers:
            a = layer.attn
            size = max_len if a.window is None else min(a.window, max_len)
            shape = (num_slots + 1, size, a.num_kv_heads, a.head_dim)
            self.k[a.layer_idx] = torch.zeros(shape, dtype=model.dtype, device=device)  # [S+1, Lc, nkv, hd]
            self.v[a.layer_idx] = torch.zeros(shape, dtype=model.dtype, device=device)
            self.window[a.layer_idx] = a.window
            for conv in (layer.attn.k_sconv, layer.attn.v_sconv, layer.attn_sconv, layer.mlp_sconv):
                self.conv[(conv.layer_idx, conv.name)] = torch.zeros(
                    num_slots + 1, conv.kernel - 1, conv.channels, dtype=torch.float32, device=device)  # [S+1, K-1, C]
        self.free = list(range(num_slots))

    def nbytes(self) -> int:
        tensors = [*self.k.values(), *self.v.values(), *self.conv.values()]
        return sum(t.numel() * t.element_size() for t in tensors)

    # -- slots ---------------------------------------------------------------------------------
    def allocate(self) -> int:
        """A free slot, zeroed (stale values, even NaN, must not reach masked keys)."""
        if not self.free:
            raise RuntimeError(f"KV pool full: all {self.num_slots} slots are in use")
        slot = self.free.pop(0)
        for t in (*self.k.values(), *self.v.values(), *self.conv.values()):
            t[slot].zero_()
        return slot

    def new_request(self) -> RequestCache:
        """A request's handle on a freshly allocated slot."""
        return RequestCache(self, self.allocate())

    def release(self, slot: int) -> None:
        if slot in self.free or not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} is not in use")
        self.free.append(slot)

    # -- prefill: one request's tokens ---------------------------------------------------------
    def past(self, layer: int, slot: int, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys/values a request's next tokens (from ``start``) see before their own: positions
        0..start-1 (sliding layers: the last window-1 of them). [n, nkv, hd] each."""
        w = self.window[layer]
        first = 0 if w is None else max(0, start - (w - 1))
        if start > self.max_len:
            raise ValueError(f"position {start} exceeds the pool's max_len {self.max_len}")
        idx = self.index(layer, torch.arange(first, start, device=self.device))
        return self.k[layer][slot, idx], self.v[layer][slot, idx]

    def write(self, layer: int, slot: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store a request's keys/values k, v [t, nkv, hd] of positions start..start+t-1."""
        if start + k.shape[0] > self.max_len:
            raise ValueError(f"request of {start + k.shape[0]} tokens exceeds the pool's max_len {self.max_len}")
        keep = min(k.shape[0], self.k[layer].shape[1])  # a ring keeps only the last window positions
        pos = torch.arange(start + k.shape[0] - keep, start + k.shape[0], device=self.device)
        idx = self.index(layer, pos)
        self.k[layer][slot, idx] = k[-keep:].to(self.k[layer].dtype)
        self.v[layer][slot, idx] = v[-keep:].to(self.v[layer].dtype)

    # -- decode: one token per slot (tensor ops only: capturable) ------------------------------
    def write_step(self, layer: int, slots: torch.Tensor, positions: torch.Tensor,
                   k: torch.Tensor, v: torch.Tensor) -> None:
        """Store one token's keys/values k, v [B, nkv, hd] per slot."""
        idx = self.index(layer, positions)  # [B]
        self.k[layer][slots, idx] = k
        self.v[layer][slots, idx] = v

    def index(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """Cache index of each position."""
        w = self.window[layer]
        return positions if w is None else positions % self.k[layer].shape[1]

    def key_positions(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """Absolute position held at each cache index after writing ``positions [B]``: [B, Lc]."""
        size = self.k[layer].shape[1]
        j = torch.arange(size, device=positions.device)  # [Lc]
        if self.window[layer] is None:
            return j.expand(positions.shape[0], -1)
        p = positions[:, None]
        return p - torch.remainder(p - j, size)  # latest position == j (mod size) at or before p

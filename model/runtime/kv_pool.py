"""Static decode state: a KV pool (full and sliding-window layers) and a short-conv state pool.

Allocated once, indexed by slot (one slot per request; the last slot is scratch, the target of
padded graph rows). Full-attention layers keep ``max_len`` positions per slot (position p at
index p); sliding layers keep a ring of ``window`` positions (position p at index p % window), so
a query at p sees keys p-window+1..p as transformers' sliding attention does. Conv states keep the
last kernel-1 fp32 inputs of each of a layer's four short convs.
"""

from __future__ import annotations

import torch

from inkling_model.layers.context import RequestCache


class KVPool:
    """KV and conv-state tensors for ``num_slots`` requests (+1 scratch slot) of ``model``."""

    def __init__(self, model, num_slots: int, max_len: int, device=None):
        device = device or next(model.parameters()).device
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
        for m in model.modules():
            if hasattr(m, "kernel") and hasattr(m, "channels"):  # ShortConv
                self.conv[(m.layer_idx, m.name)] = torch.zeros(num_slots + 1, m.kernel - 1, m.channels,
                                                               dtype=torch.float32, device=device)  # [S+1, K-1, C]
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

    def release(self, slot: int) -> None:
        if slot in self.free or not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} is not in use")
        self.free.append(slot)

    # -- prefill hand-off ----------------------------------------------------------------------
    def load(self, slot: int, cache: RequestCache) -> None:
        """Copy a request's prefilled growing cache (layers/context.py) into ``slot``."""
        n = cache.length
        if n > self.max_len:
            raise ValueError(f"prompt of {n} tokens exceeds the pool's max_len {self.max_len}")
        for i, lc in enumerate(cache.layers):
            kept = lc.k.shape[0]  # sliding layers keep only the last window-1 keys
            pos = torch.arange(n - kept, n, device=lc.k.device)
            idx = self.index(i, pos)
            self.k[i][slot, idx] = lc.k.to(self.k[i].dtype)
            self.v[i][slot, idx] = lc.v.to(self.v[i].dtype)
            for name, state in lc.conv.items():
                self.conv[(i, name)][slot] = state

    # -- addressing (tensor ops only: capturable) ----------------------------------------------
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

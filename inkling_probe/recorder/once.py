"""Each tensor stored once a step: a probe of a tensor the step recorded already is a reference.

Most module inputs are the previous module's output: ``record(model)`` with inputs on would store
them twice (2.4x the cost of outputs alone on an H100). A probed tensor is *the same* as one recorded
earlier in the step when its storage (alive since then, so its address was not reused), storage
offset, shape, strides, dtype, device and version counter are equal: nothing written through torch
changed its values since (every in-place op bumps the counter its views share). Then the recorder
sends a reference row naming the earlier key (store/refs.py) instead of its bytes.

Not seen: writes that bypass the version counter (``t.data.add_()``, a C++ extension writing through
a raw pointer without declaring the mutation). ``INKLING_PROBE_ONCE=0`` stores every tensor again.
References never cross steps: what a step recorded is forgotten at the next.
"""
from __future__ import annotations

import weakref

import torch

from inkling_probe.store import schema


class Seen:
    """The tensors recorded in the current step, by identity (docstring above)."""

    def __init__(self):
        self._step = None
        self._by_identity: dict[tuple, tuple] = {}  # identity -> (weakref to the storage, key, call)

    def earlier(self, t: torch.Tensor, row: dict) -> str | None:
        """The ``ref`` text of the earlier recording of ``t`` in ``row``'s step, or None after
        remembering ``t`` as recorded under ``row``'s key and call (``row`` is ``t``'s index row:
        its ``numel`` and ``shape`` are ``t``'s)."""
        if row["step"] != self._step:
            self._step = row["step"]
            self._by_identity.clear()
        if row["numel"] == 0:
            return None
        storage = t.untyped_storage()  # the row's shape text stands for t.shape (one str, its hash kept)
        identity = (storage.data_ptr(), t.storage_offset(), row["shape"], t.stride(), t.dtype, t.device, t._version)
        found = self._by_identity.get(identity)
        if found is not None and found[0]() is storage:  # alive: the address is still that storage's
            return schema.ref_text(found[1], found[2])
        self._by_identity[identity] = (weakref.ref(storage), row["key"], row["call"])
        return None

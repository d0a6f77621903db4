"""Each tensor stored once a step: a probe of a tensor the step recorded already is a reference.

Most module inputs are the previous module's output: ``record(model)`` with inputs on would store
them twice (2.4x the cost of outputs alone on an H100). A probed tensor is *the same* as one recorded
earlier in the step when its storage (alive since then, so its address was not reused), storage
offset, shape, strides, dtype, device and version counter are equal: nothing written through torch
changed its values since (every in-place op bumps the counter its views share). Then the recorder
sends a reference row naming the earlier key (store/refs.py) instead of its bytes.

A *reshaped view* counts too: a tensor with the storage, storage offset, dtype, device and version
counter of one recorded earlier whose values walk the same memory in the same order (:func:`walk`)
is stored as the same bytes under another shape (``q_norm``'s input is ``q_proj``'s output viewed
as heads; ``k_norm``'s is the short convolution's transposed output, viewed as heads). Its row keeps
its own shape; the writer gives it a hash of its own (store/refs.py). Views that visit memory in
another order or other memory (a transpose, a slice) hold other bytes and are stored as usual.

Not seen: writes that bypass the version counter (``t.data.add_()``, a C++ extension writing through
a raw pointer without declaring the mutation). ``INKLING_PROBE_ONCE=0`` stores every tensor again.
References never cross steps: what a step recorded is forgotten at the next.
"""
from __future__ import annotations

import functools
import weakref

import torch

from inkling_probe.store import schema


class Seen:
    """The tensors recorded in the current step, by identity (docstring above)."""

    def __init__(self):
        self._step = None
        self._by_walk: dict[tuple, tuple] = {}  # identity -> (weakref to the storage, key, call)

    def earlier(self, t: torch.Tensor, row: dict) -> str | None:
        """The ``ref`` text of the earlier recording of ``t`` in ``row``'s step, or None after
        remembering ``t`` as recorded under ``row``'s key and call (``row`` is ``t``'s index row:
        its ``numel`` and ``shape`` are ``t``'s)."""
        if row["step"] != self._step:
            self._step = row["step"]
            self._by_walk.clear()
        if row["numel"] == 0:
            return None
        storage = t.untyped_storage()
        # the walk stands for shape and strides: the same tensor, or a reshaped view of it
        identity = (storage.data_ptr(), t.storage_offset(), walk(t.shape, t.stride()), t.dtype, t.device, t._version)
        found = self._by_walk.get(identity)
        if found is not None and found[0]() is storage:  # alive: the address is still that storage's
            return schema.ref_text(found[1], found[2])
        self._by_walk[identity] = (weakref.ref(storage), row["key"], row["call"])
        return None


@functools.lru_cache(maxsize=4096)
def walk(shape: tuple, strides: tuple) -> tuple:
    """The (count, stride) steps a tensor's values take through memory in row-major order: dims of
    size 1 dropped, and a dim merged into the one before it where the two step as one (the outer
    stride is the inner size times stride). Two tensors at one storage offset with equal walks visit
    the same addresses in the same order, so their row-major values, the bytes a dump stores, are
    equal: a contiguous [2, 3, 4] and its view as [6, 4] both walk ((24, 1),); a transpose does not."""
    steps: list = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if steps and steps[-1][1] == size * stride:
            steps[-1] = (steps[-1][0] * size, stride)
        else:
            steps.append((size, stride))
    return tuple(steps)

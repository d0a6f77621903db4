"""Record one batch row of a transformers model, as if it had run alone.

``inkling_probe.record`` keeps whole tensors; a batch-composition pair needs the row that holds the
reference's prompt. The hooks here are ``record``'s, with every tensor cut to that row: ``[B, ...]``
to ``[1, ...]`` and flattened ``[B*T, ...]`` to ``[T, ...]``.
"""
from __future__ import annotations

import contextlib

import torch

import inkling_probe
from inkling_probe.hooks import flatten


def _row(t: torch.Tensor, row: int, batch: int, tokens: int) -> torch.Tensor:
    if t.dim() and t.shape[0] == batch:
        return t[row:row + 1]
    if t.dim() and t.shape[0] == batch * tokens:
        return t[row * tokens:(row + 1) * tokens]
    return t


def _token_dim(t: torch.Tensor, tokens: int):
    """The honest token dim of a cut tensor (as ``record``'s "auto" finds it for one prompt)."""
    s = tuple(t.shape)
    if len(s) >= 2 and s[0] == 1 and s[1] == tokens:
        return 1, {"batch_dim": 0}
    if len(s) >= 3 and s[0] == 1 and s[2] == tokens:
        return 2, {"batch_dim": 0}
    if s and s[0] == tokens:
        return 0, {}
    return None, {}


def _emit(items, row, batch, tokens):
    for key, t in items:
        cut = _row(t, row, batch, tokens)
        token_dim, meta = _token_dim(cut, tokens)
        inkling_probe.probe(key or "output", cut, token_dim=token_dim, **meta)


@contextlib.contextmanager
def record_row(model: torch.nn.Module, path: str, row: int, batch: int, tokens: int):
    """Like ``inkling_probe.record(model, path)`` (inputs too), keeping batch row ``row`` only."""
    handles = []

    def pre(name):
        def hook(module, args, kwargs):
            prefix = f"{name}.in" if name else "in"
            _emit(list(flatten(list(args), prefix)) + list(flatten(dict(kwargs), prefix)), row, batch, tokens)
        return hook

    def post(name):
        def hook(module, args, kwargs, output):
            _emit(flatten(output, name), row, batch, tokens)
        return hook

    with inkling_probe.recording(path, writer="inline"):
        try:
            for name, sub in model.named_modules():
                handles.append(sub.register_forward_pre_hook(pre(name), with_kwargs=True))
                handles.append(sub.register_forward_hook(post(name), with_kwargs=True))
            yield model
        finally:
            for h in handles:
                h.remove()

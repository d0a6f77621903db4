"""Ways to plant a bug in a built model, as a bring-up would meet it.

Weight edits stand for loader bugs (a scale, a permutation, a tensor not loaded). Output hooks and
wrapped forwards stand for a buggy op (a kernel that rounds, corrupts rows, or misapplies a mask);
they are registered before ``record()`` registers its own hooks, so the dump shows the buggy output.
Every function returns a ``plant(model)`` callable.
"""
from __future__ import annotations

import contextlib
import math

import torch


def param(path: str, fn, name: str = "weight"):
    """Replace ``<path>.<name>`` by ``fn(tensor)`` (computed in float32, stored back in its dtype)."""
    def plant(model):
        p = getattr(model.get_submodule(path), name)
        with torch.no_grad():
            p.copy_(fn(p.detach().float()).to(p.dtype))
    return plant


def scale(path: str, factor: float, name: str = "weight"):
    """A loader that multiplies one tensor by ``factor``."""
    return param(path, lambda w: w * factor, name)


def swap(a: str, b: str):
    """Two parameters (dotted paths from the model) loaded into each other's place."""
    def plant(model):
        pa, pb = model.get_parameter(a), model.get_parameter(b)
        with torch.no_grad():
            tmp = pa.detach().clone()
            pa.copy_(pb)
            pb.copy_(tmp)
    return plant


def attr(path: str, name: str, value):
    """Set a module attribute (a scale, a top-k, a flag) to a wrong value."""
    def plant(model):
        setattr(model.get_submodule(path), name, value(getattr(model.get_submodule(path), name))
                if callable(value) else value)
    return plant


def output(path: str, fn, item=None):
    """A module whose output (or output item ``item``) goes through ``fn``: a buggy op."""
    def plant(model):
        def hook(module, args, out):
            if item is None:
                return fn(out)
            out = list(out)
            out[item] = fn(out[item])
            return tuple(out)
        model.get_submodule(path).register_forward_hook(hook)
    return plant


def from_call(path: str, first: int, fn):
    """A module whose output goes through ``fn`` from its ``first``-th call on (0-based): a kernel
    that only the decode path (or a captured graph) runs."""
    def plant(model):
        calls = [0]

        def hook(module, args, out):
            calls[0] += 1
            return fn(out) if calls[0] > first else out
        model.get_submodule(path).register_forward_hook(hook)
    return plant


def drifting(path: str, first: int, step: float):
    """From the ``first``-th call on, the output is scaled by ``1 + step * k`` at the k-th faulty
    call (k = 1, 2, ...): a per-step state (a running scale, a cache offset) that drifts."""
    def plant(model):
        calls = [0]

        def hook(module, args, out):
            calls[0] += 1
            k = calls[0] - first
            return out * (1 + step * k) if k > 0 else out
        model.get_submodule(path).register_forward_hook(hook)
    return plant


def during(path: str, patches):
    """While ``path`` runs its forward, ``namespace.attribute`` is ``factory(original)``, for each
    ``(namespace, attribute, factory)`` in ``patches``.

    Models a kernel that computes one op wrongly inside a module, where no recorded output sits
    between the op and the module's output. Hooks run outside the forward, so the recorded inputs
    are the true ones.
    """
    def plant(model):
        module = model.get_submodule(path)
        inner = module.forward

        def forward(*args, **kwargs):
            with contextlib.ExitStack() as stack:
                for ns, name, factory in patches:
                    old = getattr(ns, name)
                    setattr(ns, name, factory(old))
                    stack.callback(setattr, ns, name, old)
                return inner(*args, **kwargs)
        module.forward = forward
    return plant


def kwarg(path: str, name: str, fn):
    """``path``'s forward receives ``fn(value, args, kwargs)`` for keyword ``name`` (hooks see the true one)."""
    def plant(model):
        module = model.get_submodule(path)
        inner = module.forward

        def forward(*args, **kwargs):
            kwargs[name] = fn(kwargs.get(name), args, kwargs)
            return inner(*args, **kwargs)
        module.forward = forward
    return plant


def replace_forward(path: str, make):
    """``path``'s forward becomes ``make(module)``: an op computed another (wrong) way."""
    def plant(model):
        module = model.get_submodule(path)
        module.forward = make(module)
    return plant


def compose(*plants):
    def plant(model):
        for p in plants:
            p(model)
    return plant


# -- tensor edits used by several families --------------------------------------------------------
def rows(t: torch.Tensor, idx, factor: float, token_dim: int = 1) -> torch.Tensor:
    """Token rows ``idx`` multiplied by ``factor``."""
    t = t.clone()
    sl = [slice(None)] * t.dim()
    sl[token_dim] = list(idx)
    t[tuple(sl)] = t[tuple(sl)] * factor
    return t


def nan_at(t: torch.Tensor, index) -> torch.Tensor:
    t = t.clone()
    t[index] = math.nan
    return t


def round_to(dtype):
    def fn(t):
        return t.to(dtype).to(t.dtype)
    return fn


def interleave_rows(w: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """[a; b] read as if it were [a0, b0, a1, b1, ...]: what a loader does that de-interleaves
    a concatenated tensor."""
    n = w.shape[dim] // 2
    idx = torch.arange(2 * n).view(n, 2).t().reshape(-1)  # new row i takes old row idx[i]
    return w.index_select(dim, torch.argsort(idx))


def heads_reversed(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a projection grouped by head, in reverse head order."""
    return w.view(heads, -1, *w.shape[1:]).flip(0).reshape(w.shape)


def mask_off_by_one(mask, args, kwargs):
    """An additive causal mask that lets token t see token t + 1 (for :func:`kwarg`)."""
    h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    q_len = k_len = h.shape[1]
    dtype, device = h.dtype, h.device
    allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(1)
    full = torch.zeros(q_len, k_len, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    if mask is None:
        return full[None, None]
    return full.expand_as(mask).to(mask.dtype)

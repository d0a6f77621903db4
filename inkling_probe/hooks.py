"""Module hooks: record the outputs (and inputs) of every submodule of any ``torch.nn.Module``.

Keys are module paths as ``named_modules()`` gives them (the root is ""), flattened:
a tensor output is ``P``; tuple/list items ``P.0``, ``P.1``; dict or ModelOutput fields ``P.<field>``;
inputs ``P.in.0`` and keyword inputs ``P.in.<name>``; a root that returns a bare tensor gives
``output``. A name map renames the full key.
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

import torch

from inkling_probe import sink
from inkling_probe.tracing import steppers
from inkling_probe.settings import glob_patterns, matches_any


def flatten(value, prefix: str):
    """Yield (key, tensor) for every tensor inside nested tuples/lists/dicts/ModelOutputs."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, dict):  # ModelOutput is an OrderedDict subclass (only set fields appear)
        for name, item in value.items():
            yield from flatten(item, _join(prefix, str(name)))
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from flatten(item, _join(prefix, str(i)))


def _join(prefix: str, suffix: str) -> str:
    return f"{prefix}.{suffix}" if prefix else suffix


_CAPTURES: "weakref.WeakValueDictionary[int, _Capture]" = weakref.WeakValueDictionary()
_NEXT_ID = itertools.count()


@torch._dynamo.assume_constant_result
def _mapped(capture_id: int, key: str) -> str:
    """The recorded name of module key ``key`` (the name map applied; "" drops it), run by dynamo at
    trace time as a constant: a regex is not traceable, and a name must not be a guard."""
    return _CAPTURES[capture_id].mapped(key)


class _Capture:
    def __init__(self, include, name_map, token_dim, batch_row=None):
        self.cid = next(_NEXT_ID)
        _CAPTURES[self.cid] = self
        self.include = glob_patterns(include)
        self.name_map = name_map
        self.token_dim = token_dim
        self.batch_row = batch_row  # keep this batch row only (None: every row)
        self.batch_tokens: tuple[int, int] | None = None  # (B, T) of the root's input, for "auto"
        self._layouts: dict = {}  # eager: shape -> layout(), under batch_tokens _layouts_for
        self._layouts_for: tuple[int, int] | None = None

    def learn_shape(self, module, args, kwargs):
        """Remember (B, T) from the root's first [B, T] integer input (or [B, T, H] embeddings)."""
        found = None
        for v in list(args) + list(kwargs.values()):
            if isinstance(v, torch.Tensor) and v.dim() == 2 and not v.is_floating_point():
                found = tuple(v.shape)
                break
        if found is None:
            emb = kwargs.get("inputs_embeds")
            if isinstance(emb, torch.Tensor) and emb.dim() == 3:
                found = tuple(emb.shape[:2])
        self.batch_tokens = found or self.batch_tokens
        if self.batch_row is not None and self.batch_tokens and self.batch_row >= self.batch_tokens[0]:
            raise ValueError(f"record(batch_row={self.batch_row}): the input has {self.batch_tokens[0]} rows")

    def cut(self, t: torch.Tensor) -> torch.Tensor:
        """Batch row ``batch_row`` of ``t``, as if its prompt ran alone: ``[B, ...]`` -> ``[1, ...]``,
        token-flattened ``[B*T, ...]`` -> ``[T, ...]``; anything else whole."""
        if self.batch_row is None or self.batch_tokens is None or t.dim() == 0:
            return t
        (b, n), r = self.batch_tokens, self.batch_row
        if t.shape[0] == b:
            return t[r:r + 1]
        if t.shape[0] == b * n:
            return t[r * n:(r + 1) * n]
        return t

    def layout(self, t: torch.Tensor) -> tuple[int | None, dict]:
        """(token_dim, meta) of one tensor: the recorded honest token dim of ``token_dim="auto"``.

        ``[B, T, ...]`` -> dim 1 (batch dim 0); ``[B, heads, T, ...]`` -> dim 2 (not ``[B, 1, X]``: one
        row of width X, which equals T by chance); ``[B*T, ...]``
        (tokens flattened, as MoE internals are) -> dim 0 with ``batch`` = B; ``[X, B*T, ...]`` (X
        experts' work stacked, as transformers' shared experts run) -> dim 1 with ``batch`` = B;
        anything else has no token dim (never sliced, compared as a whole)."""
        if self.token_dim != "auto":
            return self.token_dim, {}
        if self.batch_tokens is None or t.dim() == 0:
            return None, {}
        b, n = self.batch_tokens
        if self.batch_row is not None:  # tensors are cut to one row
            b = 1
        s = tuple(t.shape)
        if len(s) >= 2 and s[0] == b and s[1] == n:
            return 1, {"batch_dim": 0}
        if len(s) >= 3 and s[0] == b and s[2] == n and (len(s) >= 4 or s[1] > 1):
            return 2, {"batch_dim": 0}  # [B, 1, X] is one row of X (lm_head's input under generate), not [B, 1, T]
        if s[0] == b * n:
            return 0, ({"batch": b} if b > 1 else {})
        if len(s) >= 3 and s[1] == b * n:  # [X, B*T, ...]: stacked per-expert work (shared experts run as one)
            return 1, ({"batch": b} if b > 1 else {})
        return None, {}

    def wanted(self, path: str) -> bool:
        return not self.include or matches_any(path, self.include)

    def mapped(self, key: str) -> str:
        return self.name_map.apply(key) if self.name_map is not None else key

    def _emit_traced(self, key: str, tensor: torch.Tensor) -> None:
        """Inside dynamo's trace: the name an assumed constant, nothing cached (no guard on a cache)."""
        name = _mapped(self.cid, key)
        if name:
            tensor = self.cut(tensor)
            token_dim, meta = self.layout(tensor)
            sink.probe(name, tensor, token_dim=token_dim, **meta)

    def _emit(self, key: str, tensor: torch.Tensor) -> None:
        """Eager: as :meth:`_emit_traced`, with each shape's layout worked out once per (B, T)."""
        name = self.mapped(key)
        if name:
            if self.batch_row is not None:
                tensor = self.cut(tensor)
            if self._layouts_for != self.batch_tokens or len(self._layouts) > _MAX_LAYOUTS:
                self._layouts.clear()
                self._layouts_for = self.batch_tokens
            layout = self._layouts.get(tensor.shape)
            if layout is None:
                layout = self._layouts[tensor.shape] = self.layout(tensor)
            sink.probe(name, tensor, token_dim=layout[0], **layout[1])

    def pre_hook(self, path: str):
        prefix = _join(path, "in")
        keys: dict = {}  # eager: a tensor argument's position or keyword -> its key, made once

        def hook(module, args, kwargs):
            if torch.compiler.is_compiling():
                return self._inputs_traced(prefix, args, kwargs)
            for at, value in itertools.chain(enumerate(args), kwargs.items()):
                if isinstance(value, torch.Tensor):
                    key = keys.get(at)
                    if key is None:
                        key = keys[at] = _join(prefix, str(at))
                    self._emit(key, value)
                elif isinstance(value, (dict, tuple, list)):
                    for key, t in flatten(value, _join(prefix, str(at))):
                        self._emit(key, t)
        return hook

    def _inputs_traced(self, prefix: str, args, kwargs) -> None:
        for key, t in flatten(list(args), prefix):
            self._emit_traced(key, t)
        for key, t in flatten(dict(kwargs), prefix):
            self._emit_traced(key, t)

    def post_hook(self, path: str):
        whole = path or "output"

        def hook(module, args, kwargs, output):
            if torch.compiler.is_compiling():
                for key, t in flatten(output, path):
                    self._emit_traced(key or "output", t)
            elif isinstance(output, torch.Tensor):
                self._emit(whole, output)
            else:
                for key, t in flatten(output, path):
                    self._emit(key or "output", t)
        return hook


_MAX_LAYOUTS = 4096  # shapes a (B, T) keeps layouts of (a decode's growing cache adds a few a step)


class _StepEachForward:
    """Root pre-hook of ``record(steps="auto")``: a forward of the root that finds the step it ran in
    last time still current starts the next one (no caller stepped in between). Inside a compiled
    forward it is one ``inkling_probe::forward_step`` node (tracing/op.py) that decides when it runs,
    so nothing of the recorder's state is read at trace time (no guard, no recompile per step)."""

    def __init__(self) -> None:
        self.last: int | None = None  # the recorder's step id at the root's last forward
        self.handle = steppers.register(self)

    def __call__(self, module, args) -> None:
        if sink.enabled() and torch.compiler.is_compiling():
            torch.ops.inkling_probe.forward_step(self.handle)
            return
        self.forward()

    def forward(self) -> None:
        """The eager decision: step unless a caller stepped since the root's last forward."""
        rec = sink.active_recorder()
        if rec is None:
            return
        if self.last is None and not rec.step_started() or self.last is not None and rec.step_id == self.last:
            sink.step()
        self.last = rec.step_id

    def close(self) -> None:
        steppers.forget(self.handle)


@contextlib.contextmanager
def record(module: torch.nn.Module, path=None, include=None, inputs: bool = True, name_map=None,
           token_dim: int | str | None = "auto", batch_row: int | None = None, steps: str = "auto", **settings):
    """Record every matching submodule's outputs (and inputs) while the block runs.

    ``path`` is the dump directory; with ``path=None`` the already active recorder (from
    ``INKLING_PROBE`` or an enclosing :func:`inkling_probe.recording`) is used. ``include`` holds
    module-path globs (before the name map). ``name_map`` is a :class:`NameMap`, a TOML path or a
    shipped map's name. ``token_dim`` is each tensor's token dim (where a token slice,
    ``INKLING_PROBE_TOKENS``, applies and rows are compared): ``"auto"`` (default) finds it per
    tensor from the root's ``[B, T]`` input (``[B, T, ...]`` -> 1, ``[B, heads, T, ...]`` -> 2,
    token-flattened ``[B*T, ...]`` -> 0, else none); an int forces one dim for every tensor.
    ``batch_row`` keeps one row of the batch, as if that prompt ran alone (``[B, ...]`` -> ``[1, ...]``,
    ``[B*T, ...]`` -> ``[T, ...]``, B and T from the root's input as for ``"auto"``): the side of a
    batch-composition pair that holds the other side's prompt. ``steps``: ``"auto"`` (default) makes
    each forward of ``module`` one step (step 0 the first: under ``generate`` the prefill, then one
    step a decode forward) unless :func:`inkling_probe.step` was called since the last forward (the
    caller steps); ``"manual"``: only :func:`inkling_probe.step` starts a step (forwards without one
    are calls of the same step). Hooks are removed on exit, also when the block raises.

    A ``torch.compile``d module records inside its compiled graph (no graph break; docs/COMPILE.md):
    hooks are guarded from the first call on, so a graph compiled before the block is compiled again
    with them, once, and the hookless graph again after. Pass the compiled module itself (what
    ``torch.compile(m)`` returned, named as ``m``'s modules, or ``m`` after ``m.compile()``): each of its
    calls is then bracketed, so under ``mode="reduce-overhead"`` every CUDA graph replay is drained
    into the dump (tracing/replays.py).
    """
    from inkling_probe.tracing import op  # noqa: F401  (the probe ops, bound into the sink)
    from inkling_probe.tracing.freshen import guard_hooks
    from inkling_probe.store.namemap import NameMap

    if batch_row is not None and (isinstance(batch_row, bool) or not isinstance(batch_row, int) or batch_row < 0):
        raise ValueError(f"record(batch_row={batch_row!r}): expected a row index >= 0")
    if steps not in ("auto", "manual"):
        raise ValueError(f"record(steps={steps!r}): expected 'auto' or 'manual'")
    capture = _Capture(include, NameMap.load(name_map) if name_map is not None else None, token_dim, batch_row)
    guard_hooks()  # a model compiled before now must see the hooks (tracing/freshen.py)
    compiled, module = module, _uncompiled(module)
    handles = []
    with contextlib.ExitStack() as stack:
        if path is not None:
            stack.enter_context(sink.recording(path, **settings))
        elif not sink.enabled():
            raise RuntimeError("record(module) without a path needs recording on (INKLING_PROBE or recording())")
        try:
            if steps == "auto":
                stepper = _StepEachForward()
                stack.callback(stepper.close)
                handles.append(module.register_forward_pre_hook(stepper))
            handles.append(module.register_forward_pre_hook(capture.learn_shape, with_kwargs=True))
            for mpath, sub in module.named_modules():
                if not capture.wanted(mpath):
                    continue
                if inputs:
                    handles.append(sub.register_forward_pre_hook(capture.pre_hook(mpath), with_kwargs=True))
                handles.append(sub.register_forward_hook(capture.post_hook(mpath), with_kwargs=True))
            stack.enter_context(_bracketed_calls(compiled))
            yield compiled
        finally:
            for h in handles:
                h.remove()


def _uncompiled(module: torch.nn.Module) -> torch.nn.Module:
    """The module whose submodules are named and hooked: ``m`` for ``torch.compile(m)`` (no ``_orig_mod.``)."""
    from torch._dynamo.eval_frame import OptimizedModule

    return module._orig_mod if isinstance(module, OptimizedModule) else module


@contextlib.contextmanager
def _bracketed_calls(module: torch.nn.Module):
    """Bracket each call of a compiled ``module`` (tracing/replays.py) while the block runs: the wrapper
    ``torch.compile`` returned by its own hooks (they run eagerly, outside the compiled frame), a module
    compiled in place (``m.compile()``) by wrapping its compiled call. Nothing for an uncompiled one."""
    from torch._dynamo.eval_frame import OptimizedModule

    from inkling_probe.tracing import replays

    bracket = replays.ReplayRecording()
    if isinstance(module, OptimizedModule):
        opened = [False]  # this call's bracket is ours (not an outer one's)

        def before(mod, args):
            opened[0] = bracket.before_call()

        def after(mod, args, output):
            if opened[0]:
                opened[0] = False
                bracket.after_call()

        handles = [module.register_forward_pre_hook(before), module.register_forward_hook(after, always_call=True)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        return
    inner = getattr(module, "_compiled_call_impl", None)
    if inner is None:
        yield
        return

    def call(*args, **kwargs):
        with replays.calls(bracket):
            return inner(*args, **kwargs)

    module._compiled_call_impl = call
    try:
        yield
    finally:
        if module.__dict__.get("_compiled_call_impl") is call:
            module._compiled_call_impl = inner

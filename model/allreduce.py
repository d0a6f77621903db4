"""All-reduce strategies, selectable per module: ``nccl``, ``oneshot`` and ``auto``.

Every all-reduce of the model goes through :func:`all_reduce` with the name of the probe point
that follows it (``layers.3.attn.o_proj``, ``layers.0.mlp.out``, ``layers.2.mlp.experts``,
``layers.2.mlp.shared``, ``embed``). The strategy comes from ``INKLING_ALLREDUCE`` (or
:func:`use`): a default, then ``GLOB=STRATEGY`` rules, e.g. ``nccl,layers.*.attn.o_proj=oneshot``.

- ``nccl``: ``torch.distributed.all_reduce`` (NCCL on GPU, gloo on CPU). At TP=1 it still calls
  the collective when a process group exists (a 1-rank group), else it is the identity (today's path).
- ``oneshot``: every rank's input goes into a static staging buffer ``[world, numel]`` (all-gather),
  then each rank sums the rows in rank order in fp32: graph-safe (buffers allocated at warm-up,
  never inside capture) and bit-identical on every rank. At TP=1 it copies into its staging row and
  sums one row.
- ``auto``: the faster of the two for each message size, timed at warm-up (eager) and cached by
  (group, bytes, dtype); inside capture only cached sizes are allowed (all ranks agree: the slowest
  rank's timing decides).

Planted fault ``capture_unsafe_allreduce`` (faults.py): in the one-shot path, while a CUDA graph is
being captured, a message of exactly one token row (``[1, H]``: H x dtype bytes, 12288 bytes for
hidden 6144 in bf16) reduces its registered buffer without the input's copy into it being part of
the graph. Eager runs (prefill and eager decode) are correct; graph replays read the unwritten
buffer (poisoned with NaN here, so the failure is deterministic) at that size only.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import time

import torch
import torch.distributed as dist

from inkling_model.switches import faults

ENV = "INKLING_ALLREDUCE"
STRATEGIES = ("nccl", "oneshot", "auto")
FAULT = "capture_unsafe_allreduce"

_override: list[str] = []


@functools.lru_cache(maxsize=64)
def parse(spec: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``'oneshot'`` or ``'nccl,layers.*.attn.o_proj=oneshot'`` -> (default, ((glob, strategy), ...))."""
    default, rules = "nccl", []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        glob, _, name = part.rpartition("=")
        if name not in STRATEGIES:
            raise ValueError(f"{ENV}={spec!r}: unknown strategy {name!r} (known: {'|'.join(STRATEGIES)})")
        if glob:
            rules.append((glob, name))
        else:
            default = name
    return default, tuple(rules)


def spec() -> str:
    """The strategy spec in force: the innermost :func:`use`, else ``INKLING_ALLREDUCE``."""
    return _override[-1] if _override else os.environ.get(ENV, "")


@functools.lru_cache(maxsize=4096)
def _strategy(spec_text: str, name: str) -> str:
    default, rules = parse(spec_text)
    for glob, strategy in reversed(rules):  # the last matching rule wins
        if fnmatch.fnmatchcase(name, glob):
            return strategy
    return default


def strategy_for(name: str) -> str:
    """The strategy the all-reduce named ``name`` uses now."""
    return _strategy(spec(), name)


@contextlib.contextmanager
def use(spec_text: str):
    """Use strategy ``spec_text`` (same syntax as ``INKLING_ALLREDUCE``) inside the block."""
    parse(spec_text)
    _override.append(spec_text)
    try:
        yield
    finally:
        _override.pop()


def all_reduce(x: torch.Tensor, group, name: str) -> torch.Tensor:
    """Sum ``x`` over ``group`` (a parallel.Group) with the strategy chosen for ``name``; returns the sum."""
    strategy = strategy_for(name)
    if strategy == "nccl":
        return nccl(x, group)
    if strategy == "oneshot":
        return ONESHOT(x, group)
    return AUTO(x, group)


def _process_group(group):
    """The torch group to use, or None when no collective exists (TP=1 without a process group)."""
    if group.group is not None:
        return group.group
    if group.size == 1 and dist.is_available() and dist.is_initialized() and dist.get_world_size() == 1:
        return dist.group.WORLD
    return None


def capturing(x: torch.Tensor) -> bool:
    """True while ``x``'s device stream is being captured into a CUDA graph."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def nccl(x: torch.Tensor, group) -> torch.Tensor:
    """torch.distributed's all-reduce, in place."""
    pg = _process_group(group)
    if pg is not None:
        dist.all_reduce(x, group=pg)
    return x


class OneShot:
    """All-gather into a static staging buffer, then a fixed-order fp32 sum (module docstring)."""

    def __init__(self):
        self.staging: dict[tuple, torch.Tensor] = {}

    def buffer(self, x: torch.Tensor, group) -> torch.Tensor:
        """The staging buffer [world, numel] for x's message size (allocated outside capture only)."""
        key = (id(group.group), group.size, x.numel(), x.dtype, x.device)
        buf = self.staging.get(key)
        if buf is None:
            if capturing(x):
                raise RuntimeError(f"oneshot all-reduce: no staging buffer for {x.numel()} x {x.dtype} "
                                   "(run an eager warm-up step before capture)")
            buf = self.staging[key] = torch.empty(group.size, x.numel(), dtype=x.dtype, device=x.device)
        return buf

    def __call__(self, x: torch.Tensor, group) -> torch.Tensor:
        buf = self.buffer(x, group)  # [world, numel]
        flat = x.reshape(-1)
        if capturing(x) and _fault_size(x) and faults.is_active(FAULT):
            buf = torch.full_like(buf, float("nan"))  # the registered buffer, never written in the graph
        else:
            self._gather(buf, flat, group)
        acc = buf[0].to(torch.float32, copy=True)  # never alias the staging buffer (fp32 input)
        for r in range(1, group.size):  # rank order: the same bits on every rank
            acc = acc + buf[r].float()
        return acc.to(x.dtype).view_as(x)

    @staticmethod
    def _gather(buf: torch.Tensor, flat: torch.Tensor, group) -> None:
        pg = _process_group(group)
        if group.size == 1 or pg is None:
            buf[0].copy_(flat)
        elif dist.get_backend(pg) == "nccl":
            dist.all_gather_into_tensor(buf.view(-1), flat, group=pg)
        else:
            dist.all_gather(list(buf.unbind(0)), flat, group=pg)


def _fault_size(x: torch.Tensor) -> bool:
    """The planted fault's message size: exactly one token row [1, H]."""
    return x.dim() == 2 and x.shape[0] == 1


class Auto:
    """Per message size, the faster of nccl and oneshot, timed at warm-up and cached."""

    REPS = 3

    def __init__(self):
        self.choice: dict[tuple, str] = {}

    def __call__(self, x: torch.Tensor, group) -> torch.Tensor:
        key = (id(group.group), group.size, x.numel() * x.element_size(), x.dtype, x.device.type)
        choice = self.choice.get(key)
        if choice is None:
            if capturing(x):
                raise RuntimeError(f"auto all-reduce: message of {key[2]} bytes was not tuned at warm-up")
            choice = self.choice[key] = self._tune(x, group)
        return nccl(x, group) if choice == "nccl" else ONESHOT(x, group)

    def _tune(self, x: torch.Tensor, group) -> str:
        times = torch.tensor([self._time(lambda t: nccl(t, group), x),
                              self._time(lambda t: ONESHOT(t, group), x)], dtype=torch.float64)
        pg = _process_group(group)
        if pg is not None and group.size > 1:  # every rank must pick the same: the slowest decides
            times = times.to(x.device)
            dist.all_reduce(times, op=dist.ReduceOp.MAX, group=pg)
        return "nccl" if float(times[0]) <= float(times[1]) else "oneshot"

    def _time(self, fn, x: torch.Tensor) -> float:
        fn(x.clone())  # warm: allocates the staging buffer
        best = float("inf")
        for _ in range(self.REPS):
            t = x.clone()
            _sync(x)
            start = time.perf_counter()
            fn(t)
            _sync(x)
            best = min(best, time.perf_counter() - start)
        return best


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


ONESHOT = OneShot()
AUTO = Auto()


def reset() -> None:
    """Forget staging buffers and tuned choices (tests; a new model on another device)."""
    ONESHOT.staging.clear()
    AUTO.choice.clear()

"""Recording under ``torch.compile(mode="reduce-overhead")``: probes captured into CUDA graphs, drained after each call.

Under ``reduce-overhead`` Inductor runs each compiled graph through CUDA graph trees: the graph's first
call runs its generated code (warm-up), the next one captures it into a CUDA graph and replays it, and
every later call only replays it. The ``inkling_probe::emit`` op's kernel is Python (tracing/op.py): it
runs at the warm-up and during the capture, never in a replay. So recording goes in three parts, as
graphs/ does for a runner's own captures:

- **warm-up** (not capturing): the kernel records as it does eagerly (the tensor copied to the host
  first: the warm-up's allocations go to the graph's private pool, where the recorder's device buffers
  must not live) and notes each probe call of the call (id, shape, dtype): a plan. Before the next call a new plan becomes a :class:`SlotSet`: one static
  byte arena on the device with a slot per probe call, allocated outside any graph's memory pool, and its
  pinned host mirror.
- **capture**: the kernel copies each probed tensor into its slot (one captured copy a probe); the set's
  first probe also adds one to the set's stamp (one captured add a graph). ``step()``s met while
  capturing (the ``step`` and ``forward_step`` ops) are kept as the set's events, in order with its
  probes, and not taken then.
- **after every call** (:meth:`ReplayRecording.after_call`): the stamps are read; each set whose stamp
  moved was replayed by this call: its arena comes to the host and its events play into the active
  recorder (steps taken, each slot recorded under the step's layout, meta ``cudagraph: 1``).

The calls are bracketed by :func:`calls` (``record()`` of a compiled module does it for the module, and
``record_compiled`` for its program). Slot sets and stamps live as long as the process, as probe ids do:
a graph captured under one recording replays into the same slots under the next, which drains them. A
probe captured with no bracket around the call raises (one line, :class:`NotDrained`): its replays would
record nothing, and a dump that stops at the warm-up would read as complete.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from inkling_probe import sink
from inkling_probe.errors import ProbeError
from inkling_probe.graph_budget import ALIGN, BUDGET_ENV, BudgetError, budget_bytes
from inkling_probe.tracing import keys, steppers

REPLAYED = "cudagraph"  # meta key set on every row drained from a CUDA graph replay
STAMP_CAPACITY = 1024  # stamps per device tensor (one a slot set)

Signature = tuple  # ((probe id, shape, dtype), ...): a call's probe calls in order


class NotDrained(ProbeError):
    """A probe was captured into a CUDA graph with nothing around the call to drain its replays."""


@dataclass
class SlotSet:
    """The static slots of one captured call: where each probe call's copy lands, and what replays play."""

    signature: Signature
    offsets: list[int]
    arena: torch.Tensor  # [bytes] uint8 on the device
    host: torch.Tensor  # [bytes] uint8, pinned
    stamps: torch.Tensor  # int64 [STAMP_CAPACITY] on the device, shared by sets
    index: int  # this set's stamp in ``stamps``
    events: list | None = None  # [("emit", slot) | ("step", layout id) | ("forward", handle)], fixed at first capture

    def slot(self, i: int, buffer: torch.Tensor | None = None) -> torch.Tensor:
        """Slot ``i`` of the arena (or of ``buffer``, its host mirror) as a tensor of its probe's shape."""
        _, shape, dtype = self.signature[i]
        nbytes = _nbytes(shape, dtype)
        base = self.arena if buffer is None else buffer
        return base[self.offsets[i]: self.offsets[i] + nbytes].view(dtype).view(shape)


_SETS: list[SlotSet] = []
_STAMPS: dict = {}  # device -> [int64 tensors], the last one filling up
_ALLOCATED = [0]  # bytes held by every set's arena
_ACTIVE: list = []  # the ReplayRecording bracketing the call in progress (at most one)


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _stamp(device) -> tuple[torch.Tensor, int]:
    """A free stamp on ``device``: (its tensor, index)."""
    tensors = _STAMPS.setdefault(device, [])
    used = sum(1 for s in _SETS if s.stamps.device == device)
    if used >= len(tensors) * STAMP_CAPACITY:
        tensors.append(torch.zeros(STAMP_CAPACITY, dtype=torch.int64, device=device))
    return tensors[-1], used % STAMP_CAPACITY


def _allocate(signature: Signature, device) -> SlotSet | str:
    """A new slot set for ``signature`` on ``device`` (outside any graph pool: called between calls), or
    why not (over the budget: said when a capture needs it, not before; a program that never captures
    never needs it)."""
    offsets, used = [], 0
    for _, shape, dtype in signature:
        offsets.append(used)
        used += -(-_nbytes(shape, dtype) // ALIGN) * ALIGN
    budget = budget_bytes()
    if _ALLOCATED[0] + used > budget:
        return (f"recording under CUDA graphs needs {(_ALLOCATED[0] + used) / 2**20:.2f} MiB of static buffers "
                f"({len(signature)} probes in this graph), over the {budget / 2**20:.2f} MiB budget: raise "
                f"{BUDGET_ENV} or narrow INKLING_PROBE_INCLUDE")
    stamps, index = _stamp(device)
    arena = torch.empty(max(used, 1), dtype=torch.uint8, device=device)
    host = torch.empty(max(used, 1), dtype=torch.uint8, pin_memory=arena.is_cuda)
    _ALLOCATED[0] += used
    found = SlotSet(signature, offsets, arena, host, stamps, index)
    _SETS.append(found)
    return found


def _read_stamps() -> dict[int, int]:
    """Every set's stamp (id(set) -> count): waits for the device's work so far."""
    if not any(s.events is not None for s in _SETS):  # nothing captured yet: no wait
        return {}
    values = {}
    for device, tensors in _STAMPS.items():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        host = {id(t): t.tolist() for t in tensors}
        for s in _SETS:
            if s.stamps.device == device:
                values[id(s)] = host[id(s.stamps)][s.index]
    return values


@dataclass
class ReplayRecording:
    """Brackets calls of a program compiled with CUDA graphs for the active recorder (module docstring).

    ``plan_only``: calls plan and capture but record nothing, and take no step (record_compiled's
    warm-up calls); set it False for the calls to record."""

    plan_only: bool = False
    seen: dict | None = None  # the stamps after the last call
    plan: list = field(default_factory=list)  # this call's probe calls, when it ran eagerly
    events: list = field(default_factory=list)  # steps met while capturing, before the set is known
    capturing: SlotSet | None = None
    building: bool = False  # this capture is the set's first: its events are being written
    position: int = 0  # the next slot of ``capturing``
    plans: dict = field(default_factory=dict)  # signature -> device: planned, not yet allocated
    refused: str | None = None  # why the last plan got no slots (the budget)
    drained: int = 0  # tensors recorded from replays

    def before_call(self) -> bool:
        """Start bracketing a call; False when an outer bracket already does (nothing to do)."""
        if _ACTIVE:
            return False
        for signature, device in list(self.plans.items()):
            if not any(s.signature == signature for s in _SETS):
                made = _allocate(signature, device)
                self.refused = made if isinstance(made, str) else None
            del self.plans[signature]
        if self.seen is None:
            self.seen = _read_stamps()
        self.plan, self.events, self.capturing, self.position = [], [], None, 0
        _ACTIVE.append(self)
        return True

    def after_call(self, failed: bool = False) -> None:
        """Finish the call: check a capture wrote every slot, keep a new plan, drain what replayed
        (``failed``: the call raised; only the bracket is closed)."""
        _ACTIVE.remove(self)
        if failed:
            if self.capturing is not None and self.building:
                self.capturing.events = None  # a capture that broke off wrote half its events: the next writes them
            self.capturing = None
            return
        if self.capturing is not None:
            captured, self.capturing = self.capturing, None
            if self.position != len(captured.signature):
                raise RuntimeError(f"a CUDA graph capture wrote {self.position} of the {len(captured.signature)} "
                                   "probe slots its warm-up planned: the captured call differs from the warm-up")
        if self.plan:
            signature = tuple((k, shape, dtype) for k, shape, dtype, _ in self.plan)
            if not any(s.signature == signature for s in _SETS):
                self.plans[signature] = self.plan[0][3]
        stamps = _read_stamps()
        moved = [s for s in _SETS if stamps.get(id(s), 0) != (self.seen or {}).get(id(s), 0)]
        self.seen = stamps
        if moved and not self.plan_only:
            for s in moved:
                self._drain(s)

    # -- the op kernels' half (tracing/op.py) --

    def emit(self, key: int, x: torch.Tensor, capturing: bool) -> bool:
        """A probe call: True when handled here (captured, or planned only), False to record it now."""
        if not capturing:
            if not plannable(x):
                return self.plan_only
            self.plan.append((key, tuple(x.shape), x.dtype, x.device))
            if self.plan_only:
                return True
            if warming_up(x):  # the recorder's device buffers must not land in the graph's private pool
                keys.deliver(key, x.detach().to("cpu"))
                return True
            return False
        if self.capturing is None:
            s = self.capturing = self._set_for(key, x)
            s.stamps[s.index: s.index + 1].add_(1)  # captured: one add a replay
            self.building = s.events is None
            if self.building:
                s.events = list(self.events)
        s, i = self.capturing, self.position
        if i >= len(s.signature) or s.signature[i] != (key, tuple(x.shape), x.dtype):
            name = keys.resolve(key)[0]
            raise RuntimeError(f"probe {name!r}: {tuple(x.shape)} {x.dtype} captured where the warm-up had "
                               f"{_described(s, i)}: the captured call differs from the warm-up")
        s.slot(i).copy_(x.detach())  # captured: the replay refreshes the slot
        if self.building:
            s.events.append(("emit", i))
        self.position += 1
        return True

    def step(self, event: tuple, capturing: bool) -> bool:
        """A ``step``/``forward_step`` node: True when handled here (kept for replays, or swallowed)."""
        if capturing:
            if self.capturing is None:
                self.events.append(event)
            elif self.building:
                self.capturing.events.append(event)
            return True
        return self.plan_only

    def _set_for(self, key: int, x: torch.Tensor) -> SlotSet:
        """The slot set this capture writes: planned at a warm-up, its first probe call this one."""
        first = (key, tuple(x.shape), x.dtype)
        fresh = [s for s in _SETS if s.signature and s.signature[0] == first and s.events is None]
        reused = [s for s in _SETS if s.signature and s.signature[0] == first]
        if fresh or reused:
            return (fresh or reused)[0]
        name = keys.resolve(key)[0]
        if self.refused:
            raise BudgetError(f"probe {name!r} is being captured into a CUDA graph: {self.refused}")
        raise NotDrained(f"probe {name!r} is being captured into a CUDA graph whose warm-up this recording did not "
                         "see (the graph was warmed up outside it): start the recording before the compiled "
                         "program's first call, or torch._dynamo.reset() first")

    def _drain(self, s: SlotSet) -> None:
        """Bring ``s``'s arena to the host and play its events into the active recorder."""
        s.host.copy_(s.arena)  # [bytes]: waits for the replay (same stream)
        for kind, arg in s.events or ():
            if kind in STEPS:
                STEPS[kind](arg)
            else:
                rec = sink.active_recorder()
                if rec is None:
                    continue
                name, kw = keys.resolve(s.signature[arg][0])
                layout = sink.step_layout()
                meta = {**layout, **kw["meta"], REPLAYED: 1}
                rec.record(name, s.slot(arg, s.host), shard=kw["shard"], dim=kw["dim"], token_dim=kw["token_dim"],
                           meta=meta, once=False)
                self.drained += 1


def _described(s: SlotSet, i: int) -> str:
    if i >= len(s.signature):
        return "no more probe calls"
    key, shape, dtype = s.signature[i]
    return f"{keys.resolve(key)[0]!r} {shape} {dtype}"


def active() -> ReplayRecording | None:
    """The bracket of the call in progress, if any."""
    return _ACTIVE[0] if _ACTIVE else None


def plannable(x: torch.Tensor) -> bool:
    """Whether a probed tensor could be captured into a CUDA graph later (it lives on a CUDA device)."""
    return x.is_cuda


def warming_up(x: torch.Tensor) -> bool:
    """True while CUDA graph trees warm a graph up on ``x``'s device: every allocation of this thread goes
    to the graph's private pool then, and one the recorder kept alive there (its staging buffers) would be
    refused by the trees, or overwritten by a replay. Where the trees' state cannot be read, True (the
    probe then comes to the host synchronously: slower, never wrong)."""
    try:
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(x.device.index, create_if_none_exists=False)
        return manager is not None and manager.in_warmup
    except Exception:  # the trees are PyTorch internals: their names may change
        return True


def capturing(x: torch.Tensor | None = None) -> bool:
    """True while the current CUDA stream is being captured into a graph (``x``: a tensor of the call)."""
    if x is not None and not x.is_cuda:
        return False
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def claim_emit(key: int, x: torch.Tensor) -> bool:
    """The emit kernel's first question: True when the in-graph path took this probe call."""
    recording = active()
    cap = capturing(x)
    if recording is None:
        if cap:
            raise NotDrained(_undrained(keys.resolve(key)[0]))
        if x.is_cuda and warming_up(x):  # no bracket, yet the graph's warm-up: keep the pool clean all the same
            keys.deliver(key, x.detach().to("cpu"))
            return True
        return False
    return recording.emit(key, x, cap)


STEPS = {"step": keys.next_step, "forward": steppers.run}  # a step event's kind -> what takes it


def step(event: tuple) -> None:
    """A ``step``/``forward_step`` node's kernel: take the step now, unless the in-graph path keeps it."""
    if not claim_step(event):
        STEPS[event[0]](event[1])


def claim_step(event: tuple) -> bool:
    """The step kernels' first question: True when the in-graph path took this step (module docstring)."""
    recording = active()
    cap = capturing()
    if recording is None:
        if cap and sink.active_recorder() is not None:
            raise NotDrained(_undrained("step()"))
        return False
    return recording.step(event, cap)


def _undrained(what: str) -> str:
    return (f"{what} is being captured into a CUDA graph (torch.compile mode='reduce-overhead') with nothing to "
            "drain its replays: record the compiled module itself (inkling_probe.record(torch.compile(m, ...))), "
            "wrap the compiled callable in inkling_probe.compiled.replayed(fn), or use record_compiled")


@contextlib.contextmanager
def calls(recording: ReplayRecording):
    """One call of the compiled program, bracketed by ``recording`` (nothing when an outer bracket runs)."""
    mine = recording.before_call()
    try:
        yield
    except BaseException:
        if mine:
            recording.after_call(failed=True)
        raise
    if mine:
        recording.after_call()


def replayed(fn):
    """``fn`` (a callable compiled with CUDA graphs) with each call bracketed for the active recording.

    For probes the program calls (:func:`inkling_probe.probe` under :func:`inkling_probe.recording`);
    ``inkling_probe.record(compiled_module)`` brackets a module's calls by itself. Reached as
    ``inkling_probe.compiled.replayed``, which also binds the probe ops into the sink (tracing/op.py)."""
    import functools

    recording = ReplayRecording()

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with calls(recording):
            return fn(*args, **kwargs)

    call.replays = recording
    return call

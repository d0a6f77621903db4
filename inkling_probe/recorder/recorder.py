"""The recorder behind an enabled sink: filters, slices and copies each probed tensor to the host,
then hands it to the writer (a separate process by default; see store/writer_process.py)."""
from __future__ import annotations

import functools
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter

import torch

from inkling_probe.errors import DumpError, NothingRecorded, ProbeError, SettingsError
from inkling_probe.keys import key_problem
from inkling_probe.recorder.host_writer import HostWriter
from inkling_probe.recorder.once import Seen
from inkling_probe.settings import MAX_RANK, Settings, rank_from_env
from inkling_probe.store import consolidated, schema
from inkling_probe.store.dtypes import dtype_name


def current_rank() -> tuple[int, int]:
    """(rank, world size) from torch.distributed when initialised, else RANK/WORLD_SIZE, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        if world > MAX_RANK + 1:
            raise SettingsError(f"world size {world}: inkling-probe records at most {MAX_RANK + 1} ranks")
        return rank, world
    return rank_from_env(os.environ)


_opens: Counter = Counter()  # dump folder -> recordings this process opened there (the same on every rank)


def launch_token(path: str, world_size: int) -> str:
    """A token every rank of this launch agrees on for its n-th recording into ``path``, through the
    process group's own store (the rendezvous: one per launch, whatever process tree runs the ranks);
    '' without an initialised process group of several ranks. No collective: a rank never waits."""
    dist = torch.distributed
    if world_size < 2 or not (dist.is_available() and dist.is_initialized()):
        return ""
    try:
        from torch.distributed.distributed_c10d import _get_default_store
        store = _get_default_store()
    except (ImportError, RuntimeError, ValueError):
        return ""  # a process group without a store: the next identity (docs/FORMAT.md, "Runs")
    folder = os.path.abspath(path)
    _opens[folder] += 1
    key = f"inkling_probe/run/{_opens[folder]}/{folder}"
    import uuid
    try:  # the first rank's fresh id wins; the others read it
        return store.compare_set(key, "", uuid.uuid4().hex).decode()
    except (RuntimeError, AttributeError, UnicodeDecodeError) as e:
        raise DumpError(f"{path}: can't agree on a run id through torch.distributed's store ({e}); "
                        "set INKLING_PROBE_RUN to one value on every rank") from None


def writer_mode(setting: str) -> str:
    """``process`` when this process may run on two cores or more, else ``inline`` (unless set)."""
    if setting != "auto":
        return setting
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return "process" if cores >= 2 else "inline"


class Recorder:
    """Records probe calls for one process (one rank) according to :class:`Settings`.

    Safe to call from several threads (one lock around each call). A forked child inherits it
    detached: its probes raise, and its exit leaves the parent's writer alone.
    """

    def __init__(self, settings: Settings, stager=None, early_writer: bool = True):
        self.settings = settings
        self.step_id = 0
        self.rank, self.world_size = 0, 1
        self.mode = writer_mode(settings.writer)
        self._touched = False
        self._seq = 0
        self._calls: dict = {}
        self._wanted_step, self._step_selected = None, False  # _step_wanted's cache
        self._writer = None
        self._lock = None  # the folder's rank lock while recording
        self._opened = False
        self._dirty = False  # something was recorded since the last segment ended
        self._wanted: dict[str, bool] = {}  # name -> passes the include/exclude globs
        self._mutex = threading.RLock()
        self._wlock = threading.Lock()  # writer calls, from this thread and the drain thread
        self._host_writer = HostWriter(self._wlock, settings.mode)  # this thread's and the drain's writes
        self._stager = stager  # given: every tensor goes through the drain (tests); else CUDA ones only
        self._drain = None
        self._pid = os.getpid()
        self._failed: ProbeError | None = None
        self._once = Seen() if settings.once else None  # each tensor stored once a step (once.py)
        self._spare = None  # the writer process, started early so its start-up overlaps the model's
        if self.mode == "process" and early_writer:
            from inkling_probe.store.writer_process import ProcessWriter
            self._spare = ProcessWriter()

    # -- lifecycle -------------------------------------------------------------------------
    def _open(self):
        self._opened = True
        self.rank, self.world_size = current_rank()
        s = self.settings
        if s.ranks is not None and min(s.ranks) >= self.world_size:
            raise SettingsError(f"INKLING_PROBE_RANKS={','.join(map(str, sorted(s.ranks)))}: selects no rank "
                                f"of this launch (world size {self.world_size}, ranks 0..{self.world_size - 1})")
        if not s.rank_records(self.rank):
            return None
        from inkling_probe.store.folder import launcher_identity, prepare, run_id

        launch = "" if s.run or launcher_identity(os.environ) else launch_token(s.path, self.world_size)
        run = run_id(os.environ, self.world_size, s.run, launch)
        self._lock = prepare(s.path, self.rank, run, s.overwrite)
        options = dict(run_id=run, segment_mb=s.segment_mb, compress=s.compress, pack_kb=s.pack_kb,
                       workers=s.writer_threads, lanes=s.writer_lanes,
                       run_meta=json.dumps(_run_meta(s), sort_keys=True, default=str))
        if self.mode == "process":
            from inkling_probe.store.writer_process import ProcessWriter
            spare, self._spare = self._spare or ProcessWriter(), None
            self._writer = spare.open(s.path, self.rank, self.world_size, **options)
        else:
            from inkling_probe.store.writer import SegmentWriter
            _ignore_file_size_signal()
            self._writer = SegmentWriter(s.path, self.rank, self.world_size, **options)
        self._host_writer.attach(self._writer)
        return self._writer

    def step_started(self) -> bool:
        """Whether a step was started (:meth:`next_step` called, or anything recorded)."""
        return self._touched

    def next_step(self) -> None:
        """Start the next step (after the current one is on disk); the first call keeps step 0."""
        with self._mutex:
            self._check_usable()
            if self._touched:
                if self._writer is not None and self._dirty:
                    self._guarded("ending step", self._end_step)
                    self._dirty = False
                elif hasattr(self._writer, "wait_for_ends"):  # durability=writer: the step before
                    self._guarded("ending step", self._writer.wait_for_ends)  # is on disk, recorded or not
                self.step_id += 1
            self._touched = True
            self._seq = 0
            self._calls.clear()

    def _end_step(self) -> None:
        if self._drain is not None:
            self._drain.flush()
        with self._wlock:
            if self.settings.durability == "writer" and self.mode == "process":
                self._writer.end_segment(self.step_id, wait=False)  # the step before is on disk
            else:
                self._writer.end_segment(self.step_id)

    def close(self, interrupted: bool = False) -> None:
        """Finish the last segment; ``interrupted``: the current step did not complete (an exception)."""
        with self._mutex:
            if os.getpid() != self._pid:
                return  # a forked child: the writer is the parent's
            try:
                if self._drain is not None and self._failed is None:
                    self._guarded("closing the dump", self._drain.flush)
            finally:
                if self._drain is not None:
                    self._drain.close()
                    if hasattr(self._drain.stager, "close"):
                        self._drain.stager.close()  # the ring is unregistered before it is unmapped
                    self._drain = None
            writer, self._writer = self._writer or self._spare, None
            self._host_writer.detach()
            self._spare = None
            try:
                if writer is not None and self._failed is None:
                    done = self.step_id - 1 if interrupted else self.step_id
                    self._guarded("closing the dump", lambda: writer.close(complete_through_step=done))
                    consolidated.write_rank(self.settings.path, self.rank)  # one index file a rank, for readers
            finally:
                if self._lock is not None:
                    self._lock.release()
                    self._lock = None
            if not self._opened and self._wanted and not interrupted and self._failed is None:
                raise NothingRecorded(f"{self.settings.path}: recorded nothing, so there is no dump: "
                                      f"{self._why_nothing()}")

    def _why_nothing(self) -> str:
        """Which filter selected nothing, from the probe names and steps this recording saw (a
        recording no probe reached, e.g. one whose probes all went to a CUDA-graph plan, is not
        judged: nothing was filtered)."""
        s, names = self.settings, list(self._wanted)
        if not any(self._wanted.values()):
            shown = ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")
            globs = " ".join(f"{var}={','.join(g)!r}" for var, g in
                             (("INKLING_PROBE_INCLUDE", s.include), ("INKLING_PROBE_EXCLUDE", s.exclude)) if g)
            return f"{globs} matched none of the {len(names)} probe names called ({shown})"
        return (f"INKLING_PROBE_STEPS={s.steps} selected none of the steps run "
                f"({'0' if self.step_id == 0 else f'0..{self.step_id}'})")

    def after_fork_in_child(self) -> None:
        """Detach from the parent's writer: nothing this process does may reach its files."""
        self._failed = DumpError(f"pid {os.getpid()} is a fork of the recording process {self._pid}: a forked "
                                 "child does not record (start a recording in the child)")
        writer, self._writer, self._spare, self._lock = self._writer, None, None, None
        self._host_writer.detach()
        self._drain = None  # its thread did not survive the fork
        if hasattr(writer, "detach_after_fork"):
            writer.detach_after_fork()
        self._mutex = threading.RLock()  # a lock held by another thread at the fork stays held

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _guarded(self, what: str, action) -> None:
        """Run a writer action; its failure stops recording with one line (raised now and after)."""
        try:
            action()
        except ProbeError as e:
            self._fail(e)
        except Exception as e:
            from inkling_probe.store.summarise import why
            self._fail(DumpError(f"{what} in {self.settings.path}: {why(e)}"))

    def _fail(self, error: ProbeError):
        self._failed = error
        writer, self._writer = self._writer, None
        self._host_writer.detach()
        for stop in ("abort", "abandon"):
            if hasattr(writer, stop):
                getattr(writer, stop)()
        raise error

    # -- recording -------------------------------------------------------------------------
    def record(self, name: str, tensor, *, shard="replicated", dim=None, token_dim=0, meta=None,
               once: bool = True) -> None:
        """Record ``tensor`` under ``name`` in the current step; ``once=False``: never as a reference to
        an earlier recording of the same storage (a compiled program reuses its buffers without bumping
        their version counters, so identity there says nothing about the values)."""
        with self._mutex:  # the per-probe path: every call here is paid once per probe (GPU: ~150 a forward)
            if self._failed is not None:
                raise self._failed
            self._touched = True
            seq = self._seq
            self._seq += 1
            wanted = self._wanted.get(name)
            if wanted is None:
                _check_name(name)
                wanted = self._wanted[name] = self.settings.wants(name)
            if not wanted or not self._step_wanted:
                return
            writer = self._writer if self._opened else self._guarded_open()
            if writer is None:
                return
            row, t = self._row(name, tensor, shard, dim, token_dim, meta, seq)
            if once and self._once is not None and self._referenced(row, t):
                return
            try:
                if t.is_cuda or self._stager is not None:
                    self._staged(row, t)
                else:
                    self._host_writer.write(row, t.contiguous(), None, None)
            except Exception as e:  # as _guarded, without its per-probe closure
                self._guarded(f"recording {name!r}", _raiser(e))
            self._dirty = True

    def _referenced(self, row: dict, t) -> bool:
        """Is ``t`` recorded already in this step? Then its row goes to the writer as a reference
        to that recording (recorder/once.py), without bytes."""
        ref = self._once.earlier(t, row)
        if ref is None:
            return False
        row["ref"] = ref
        try:
            with self._wlock:
                self._writer.add_ref(row)
        except Exception as e:  # as _guarded, without its per-probe closure
            self._guarded(f"recording {row['key']!r}", _raiser(e))
        self._dirty = True
        return True

    @property
    def _step_wanted(self) -> bool:
        """Does INKLING_PROBE_STEPS select the current step? (asked once a step)"""
        if self._wanted_step != self.step_id:
            self._wanted_step, self._step_selected = self.step_id, self.step_id in self.settings.steps
        return self._step_selected

    def _staged(self, row: dict, t) -> None:
        """Copy ``t`` to the host asynchronously; the drain hands it to the writer (drain.py)."""
        if self._drain is None:
            from inkling_probe.recorder.drain import Drain
            from inkling_probe.recorder.step_batch import StepBatch
            stager = self._stager or self._device_stager()
            batch = StepBatch(stager, stats=self.settings.mode != "hash") if self._stager is None else None
            self._drain = Drain(stager, self._host_writer, batch,
                                threaded=self.mode != "process")  # a message to the writer process: cheap
        if self._drain.error is not None:
            raise self._drain.error
        self._drain.put(row, t)

    def _device_stager(self):
        """Staging into the writer process's shared ring (registered as pinned memory: no host
        copy), or, inline or where the ring is missing or can't be registered, pooled pinned buffers."""
        from inkling_probe.recorder.staging import CudaStager, RingStager

        find = getattr(self._writer, "staging_ring", None)
        ring = find() if find is not None else None
        if ring is not None:
            try:
                stager = RingStager(ring, self._writer.wait_for_ring_space)
            except OSError as e:
                sys.stderr.write(f"inkling-probe: {e}; staging through pinned buffers (slower)\n")
            else:
                self._writer.claim_ring()  # only now: refused, the ring stays the writer's to use
                return stager
        return CudaStager()

    def _guarded_open(self):
        try:
            return self._open()
        except ProbeError as e:
            self._failed = e
            raise

    def _row(self, name, tensor, shard, dim, token_dim, meta, seq) -> tuple[dict, object]:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"probe {name!r}: expected a torch.Tensor, got {type(tensor).__name__}")
        if shard != "replicated":
            _check_layout(name, tensor, shard, dim)
        calls = self._calls
        call = calls.get(name, 0)
        calls[name] = call + 1
        shape = tensor.shape
        token_dim = _token_dim(len(shape), token_dim)
        t, token_start = tensor.detach() if tensor.requires_grad else tensor, 0
        if token_dim is not None and self.settings.tokens is not None:
            t, token_start = _slice_tokens(t, self.settings.tokens, token_dim)
            shape = t.shape
        if t.is_cuda:
            if torch.cuda.is_current_stream_capturing():
                raise SettingsError(f"probe {name!r}: eager probes cannot run inside CUDA-graph capture")
        elif not t.is_cpu:
            t = t.cpu()  # other devices: a synchronous copy
        shape_text, numel = _shape_info(shape)
        row = {
            "key": name, "step": self.step_id, "seq": seq, "call": call, "rank": self.rank,
            "shape": shape_text, "dtype": _dtype_text(t.dtype), "storage": "",
            "shard": shard, "dim": dim % len(shape) if shard == "concat" else schema.NO_DIM,
            "token_dim": schema.NO_DIM if token_dim is None else token_dim, "token_start": token_start,
            "numel": numel, "meta": _meta_text(meta) if meta else "",
        }
        return row, t


def _raiser(error: BaseException):
    """An action that raises ``error`` (for :meth:`Recorder._guarded`, once it was caught)."""
    def action():
        raise error
    return action


@functools.lru_cache(maxsize=4096)
def _shape_info(shape) -> tuple[str, int]:
    """A torch.Size's index text ('4x128') and element count, made once per shape."""
    return schema.shape_text(shape), math.prod(shape)


@functools.lru_cache(maxsize=64)
def _dtype_text(dtype) -> str:
    """A torch.dtype's index text, made once per dtype."""
    return dtype_name(dtype)


_PLAIN = frozenset((str, int, type(None)))  # exactly these types: 1, True and 1.0 are equal keys but not equal JSON


def _meta_text(meta: dict) -> str:
    """The meta's JSON (sorted keys): cached when every value is a str, int or None (hooks'
    ``batch_dim``, the model's ``kind``); ~3 us a probe otherwise (lists, floats, ...)."""
    for v in meta.values():
        if type(v) not in _PLAIN:
            return json.dumps(meta, sort_keys=True, default=str)
    return _plain_meta_text(tuple(meta.items()))


@functools.lru_cache(maxsize=4096)
def _plain_meta_text(items: tuple) -> str:
    return json.dumps(dict(items), sort_keys=True, default=str)


def _ignore_file_size_signal() -> None:
    """A file size limit (RLIMIT_FSIZE) then fails the write with EFBIG (one line), not a kill."""
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGXFSZ) == signal.SIG_DFL:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _check_name(name) -> None:
    if not isinstance(name, str):
        raise SettingsError(f"probe name {name!r}: expected a str, got {type(name).__name__}")
    if name in ("", ".", ".."):
        raise SettingsError(f"probe name {name!r}: expected a dotted name (not empty, '.' or '..')")
    for c in "/\0#":
        if c in name:
            raise SettingsError(f"probe name {name!r}: must not contain {c!r} ('/' separates HDF5 "
                                "groups, '#' marks a repeated call's dataset)")
    problem = key_problem(name)
    if problem:
        raise SettingsError(f"probe name {name!r}: {problem}; no command could report it")


def _check_layout(name: str, tensor: torch.Tensor, shard: str, dim) -> None:
    if shard == "replicated":
        return
    if shard not in schema.SHARDS:
        raise SettingsError(f"probe {name!r}: shard={shard!r}, expected one of {'|'.join(schema.SHARDS)}")
    if shard == "concat" and (dim is None or not -tensor.dim() <= dim < tensor.dim()):
        raise SettingsError(f"probe {name!r}: shard='concat' needs dim within the tensor's {tensor.dim()} dims")


def _token_dim(dims: int, token_dim: int | None) -> int | None:
    """The token dim of a tensor of ``dims`` dims, normalised (negative dims count from the end); None
    if it has none."""
    if token_dim is None:
        return None
    return token_dim % dims if -dims <= token_dim < dims else None


def _slice_tokens(t: torch.Tensor, tokens: slice | None, token_dim: int | None):
    if tokens is None or token_dim is None:
        return t, 0
    start, _, _ = tokens.indices(t.shape[token_dim])
    return t[(slice(None),) * token_dim + (tokens,)], start


def _run_meta(s: Settings) -> dict:
    return {
        "argv": sys.argv, "pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
        "torch": torch.__version__, "python": sys.version.split()[0],
        "settings": {k: repr(v) for k, v in s.__dict__.items()},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("INKLING_", "NCCL_", "CUDA_"))},
    }

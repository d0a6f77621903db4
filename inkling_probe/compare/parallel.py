"""Read-ahead for compare: the heavy, stateless part of measuring a pair runs in worker processes.

Judging a pair is sequential and carries state (precision so far, token rows set aside after a
routing change, decisions): it stays in the main process, in the walker, unchanged. What costs
time is stateless: reading both arrays, conforming their shapes, and the float64 reductions
(metrics, per-row errors). :class:`ReadAhead` runs exactly that, :func:`measure.measure` with no
rows set aside, for the pairs the walker will ask for next, ``jobs`` worker processes at a time,
a bounded window ahead; each worker opens the dumps itself and returns only the small result
(:class:`Measured`: metrics and one float per token row), so the main process never holds arrays.

The walker's call of ``measure`` takes a result from here only when it would have computed the
same thing: the same entries, metric, tolerance and batch rows, nothing to keep or realign, and no
rows to set aside for the result's token rows. Anything else (a guess of the tolerance that turned
out wrong, a key after a routing change) is measured in the main process as before. So the report
is identical whatever ``jobs`` is; only the time differs (tests/compare/test_parallel.py).

    with read_ahead(dumps, pairs, plan, jobs=4):
        ... walker.row(p) for p in pairs ...
"""
from __future__ import annotations

import contextlib
import itertools
import os
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from inkling_probe.compare.align import Entry, Pair
from inkling_probe.compare import readahead
from inkling_probe.compare.readahead import active, installed
from inkling_probe.removed import module_getattr

MIN_BYTES = 64 << 20  # below this much data to read, worker start-up costs more than it saves
MAX_POOLS = 3  # a worker's death starts a fresh pool at most twice; after that this process measures the rest
LAST_WORKERS: dict = {}  # pid -> {"cpu_s", "peak_rss"} of the last read-ahead's workers (benchmarks)


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_BLAS_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                 "scipy_openblas_set_num_threads", "MKL_Set_Num_Threads")
_BLAS_GETTERS = ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                 "scipy_openblas_get_num_threads", "MKL_Get_Max_Threads")


def _blas_libs() -> list:
    """The BLAS libraries loaded in this process (from /proc/self/maps; none found elsewhere)."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line.lower() or "mkl_rt" in line.lower()}
    except OSError:
        return []
    libs = []
    for path in sorted(paths):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def set_blas_threads(n: int) -> list:
    """Set numpy's BLAS to ``n`` threads; returns what undoes it (for :func:`restore_blas_threads`)."""
    undo = []
    for lib in _blas_libs():
        for set_name, get_name in zip(_BLAS_SETTERS, _BLAS_GETTERS):
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                undo.append((setter, int(getter())))
                setter(n)
                break
    return undo


def restore_blas_threads(undo: list) -> None:
    for setter, n in undo:
        setter(n)


@contextlib.contextmanager
def one_blas_thread():
    """numpy's BLAS on one thread while the body runs. compare's float64 dot products are
    memory-bound, one chunk at a time: BLAS threads only spin (measured on a loaded 2-core
    machine: 3.7x the CPU time, 3.8x the wall time of one thread); ``jobs`` is the parallelism."""
    undo = set_blas_threads(1)
    try:
        yield
    finally:
        restore_blas_threads(undo)


class Job:
    """One measurement to run ahead: ``measure(ref, cand, metric, rtol, batch_rows=...)``."""

    __slots__ = ("ref_path", "ref", "cand_path", "cand", "metric", "rtol", "batch_rows", "key", "nbytes", "labels")

    def __init__(self, ref_dump, ref: Entry, cand_dump, cand: Entry, metric: str, rtol: float, batch_rows,
                 labels=("reference", "candidate")):
        self.ref_path, self.ref, self.cand_path, self.cand = ref_dump.path, ref, cand_dump.path, cand
        self.labels = labels  # which of compare's dumps each side is (named in a cluster's notes)
        self.metric, self.rtol, self.batch_rows = metric, float(rtol), tuple(batch_rows)
        self.key = readahead.key_of(ref_dump, ref, cand_dump, cand, metric, rtol, batch_rows)
        self.nbytes = sum(int(r.get("numel") or 0) * 4 for r in ref.rows + cand.rows)  # about


class ReadAhead:
    """Runs the :class:`Job` list in order, ``window`` pairs (and ``window_bytes``) ahead of the one last taken.

    A worker that dies (the OOM killer, a kill) takes the pool with it and every job still pending
    in it: those jobs go to a fresh pool once, and a job lost twice, or lost once the fresh pools
    are spent (:data:`MAX_POOLS`), is measured in this process by the walker, as with one job. So
    the report is the same as one job's; :meth:`notes` says what was measured again and where."""

    def __init__(self, plan: list[list[Job]], jobs: int, window: int | None = None, pool=None,
                 window_bytes: float = float("inf")):
        self.plan = plan  # per pair (walk order): its jobs
        self.jobs = jobs
        self.window = window or 2 * jobs
        self.window_bytes = window_bytes  # and no further ahead than this much data (a cluster's batches)
        self.upto = list(itertools.accumulate((sum(j.nbytes for j in js) for js in plan), initial=0))
        self.pending: OrderedDict[tuple, tuple[int, Future]] = OrderedDict()
        self.index = {j.key: i for i, js in enumerate(plan) for j in js}
        self.by_key = {j.key: j for js in plan for j in js}
        self.next = 0  # first pair not yet submitted
        self.hits = self.misses = 0
        self.workers: dict = {}  # pid -> its latest {"cpu_s", "peak_rss"}
        self.deaths = 0  # pools lost to a worker's death
        self.retried: dict[tuple, str] = {}  # key -> where its lost job was measured again ("worker" / "here")
        # pool: what runs _run (submit, shutdown): worker processes, or a Dask cluster's (compare/cluster.py)
        self.pool = pool or self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.jobs, mp_context=_context(), initializer=_init_worker)

    def take(self, key: tuple):
        """The worker's :class:`Measured` for ``key`` (waiting for it), or None when not planned
        (or lost with a worker for good: the caller measures it)."""
        i = self.index.get(key)
        if i is None:
            self.misses += 1
            return None
        self._fill(i)
        self._drop_before(i)
        while True:
            got = self.pending.pop(key, None)
            if got is None:
                self.misses += 1
                return None
            try:
                measured, pid, usage = got[1].result()
                break
            except BrokenProcessPool:  # a worker died: this job was lost with the others
                self.pending[key] = got
                self._restart()
            except Exception:  # a worker that raised: measured here, raising here if it must
                self.misses += 1
                return None
        self._fill(i)
        self.hits += 1
        self.workers[pid] = usage
        return measured

    def notes(self) -> list[str]:
        """One line when a worker died: how many keys were measured again, and where."""
        if not self.deaths:
            return []
        again = sorted(self.retried.items(), key=lambda kv: self.index.get(kv[0], 0))
        here = [k for k, where in again if where == "here"]
        names = ", ".join(f"{k[1]}@{k[2]}" for k, _ in again[:4]) + (" ..." if len(again) > 4 else "")
        return [f"jobs: a worker process died {self.deaths} time(s) (killed: out of memory?); the {len(again)} "
                f"measurement(s) it held were made again, {len(again) - len(here)} in a fresh worker and "
                f"{len(here)} in this process ({names}); the verdict is the one job's"]

    def _fill(self, i: int) -> None:
        while self.pool is not None and self.next < len(self.plan) and (self.next <= i or (
                self.next <= i + self.window and self.upto[self.next + 1] - self.upto[i] <= self.window_bytes)):
            for j in self.plan[self.next]:
                self._submit(j, self.next)
            self.next += 1

    def _submit(self, job: Job, n: int) -> None:
        try:
            self.pending[job.key] = (n, self.pool.submit(_run, job))
            return
        except Exception:  # a death seen at submit (BrokenProcessPool; OSError, EOFError or a refused
            self._restart()  # connection: the executor's queue or forkserver gone under it; measured under xdist load)
        if self.pool is not None and job.key not in self.pending:
            try:
                self.pending[job.key] = (n, self.pool.submit(_run, job))
            except Exception:  # the fresh pool cannot take work either: this process measures the rest
                self._give_up()

    def _restart(self) -> None:
        """The pool broke: keep what finished, give each lost job one more try in a fresh pool
        (while :data:`MAX_POOLS` allows), else leave it to this process."""
        self.deaths += 1
        _abandon(self.pool)
        try:
            self.pool = self._new_pool() if self.deaths < MAX_POOLS else None
        except Exception:  # no fresh pool can start (its forkserver gone): this process measures the rest
            self.pool = None
        for key, (n, fut) in list(self.pending.items()):
            if _finished(fut):
                continue  # finished before the death
            if self.pool is not None and key not in self.retried:
                self.retried[key] = "worker"
                try:
                    self.pending[key] = (n, self.pool.submit(_run, self.by_key[key]))
                except Exception:  # the fresh pool could not take it (broke, or never started): measured here
                    self.retried[key] = "here"
                    self.pending.pop(key)
            else:
                self.retried[key] = "here"
                self.pending.pop(key)

    def _give_up(self) -> None:
        """No pool can take work: every unfinished job is measured in this process (as with one job)."""
        if self.pool is not None:
            _abandon(self.pool)
        self.pool = None
        for key, (n, fut) in list(self.pending.items()):
            if not _finished(fut):
                self.retried[key] = "here"
                self.pending.pop(key)

    def _drop_before(self, i: int) -> None:
        """Results of pairs already walked past (skipped rows) are never asked for: drop them."""
        for k in [k for k, (n, _) in self.pending.items() if n < i]:
            self.pending.pop(k)[1].cancel()

    def close(self) -> None:
        for _, f in self.pending.values():
            f.cancel()
        self.pending.clear()
        if self.pool is not None and getattr(self.pool, "_broken", False):  # a death after the last take
            _abandon(self.pool)
        elif self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        LAST_WORKERS.clear()
        LAST_WORKERS.update(self.workers)


def _finished(fut) -> bool:
    """A job whose result is in (a death after it changes nothing)."""
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _abandon(pool: ProcessPoolExecutor) -> None:
    """Let a broken pool go without waiting on it: its surviving workers are killed first (Python
    3.11's executor, cleaning up after a death, can wait forever on a worker it is joining: the kill
    harness hung so, once in its first few runs)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def worker_notes() -> list[str]:
    """The running read-ahead's notes (a worker's death), for the report; [] without one."""
    notes = getattr(active(), "notes", None)
    return notes() if callable(notes) else []


def _context():
    import multiprocessing


    # fork shares nothing the workers need (each opens its own files) and starts in milliseconds;
    # spawn where fork is unsafe or missing.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


_DUMPS: dict = {}  # per worker process: path -> open Dump
_BASE: list = []  # per worker process: its peak RSS after start-up (bytes)


def _init_worker() -> None:
    import numpy  # noqa: F401  (loads its BLAS)

    from inkling_probe.compare import measure  # noqa: F401  (and everything a job imports)
    from inkling_probe.store import dump  # noqa: F401

    set_blas_threads(1)  # for the worker's life
    _BASE.append(_usage()["peak_rss"])


def _run(job: Job, dumps: dict | None = None):
    from inkling_probe.compare.measure import measure
    from inkling_probe.store.dump import Dump

    opened = _DUMPS if dumps is None else dumps  # path -> open Dump

    def dump(path):
        if path not in opened:
            opened[path] = Dump(path)
        return opened[path]

    m = measure(dump(job.ref_path), job.ref, dump(job.cand_path), job.cand, job.metric, job.rtol,
                batch_rows=job.batch_rows)
    return m, os.getpid(), _usage()


def _usage() -> dict:
    """This process's CPU seconds and peak RSS (bytes) so far."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss": ru.ru_maxrss * 1024,
            "base_rss": _BASE[0] if _BASE else 0}


def plan_of(dumps: dict, pairs: list[Pair], rtol_of, metric: str, batch_rows, control_entry) -> list[list[Job]]:
    """The measurements the walker will ask for, pair by pair, in walk order.

    ``rtol_of(pair)`` is the tolerance the walker is expected to use (a guess: a wrong one only
    costs a measurement in the main process); ``control_entry(pair)`` the control's entry or None.
    Pairs settled by the index hashes read nothing and are left out.
    """
    from inkling_probe.compare.measure import same_bits

    plan = []
    for p in pairs:
        rtol, js = rtol_of(p), []
        if not (same_bits(p.ref, p.cand) and tuple(batch_rows) == (None, None)):
            js.append(Job(dumps["reference"], p.ref, dumps["candidate"], p.cand, metric, rtol, batch_rows))
        ctl = control_entry(p)
        if ctl is not None and not (same_bits(p.ref, ctl) and batch_rows[0] is None):
            js.append(Job(dumps["reference"], p.ref, dumps["control"], ctl, metric, rtol, (batch_rows[0], None),
                          ("reference", "control")))
        plan.append(js)
    return plan


@contextlib.contextmanager
def read_ahead(plan: list[list[Job]], jobs: int | None = None, min_bytes: int = MIN_BYTES, pool=None):
    """Measure ``plan`` ahead in ``jobs`` worker processes (default: the cores) while the body runs;
    nothing runs ahead with one job or with less than ``min_bytes`` to read (the walker reads itself:
    a thread reading ahead cost 1.35x the wall time on 2 shared cores, docs/COMPARE.md). ``pool``: a
    compare/cluster.py ClusterPool measuring on a Dask cluster, ``pool.jobs`` at a time, whatever the total,
    the pairs of at least ``pool.min_pair_bytes``, as far ahead as its batched tasks need
    (``pool.ahead_pairs``, ``pool.ahead_bytes``)."""
    jobs = default_jobs() if jobs is None else jobs
    if pool is not None:  # a pair too small to be worth a trip to the cluster is measured by the walker
        jobs, min_bytes = pool.jobs, 0
        plan = [[j for j in js if j.nbytes >= pool.min_pair_bytes] for js in plan]
    total = sum(j.nbytes for js in plan for j in js)
    if (jobs <= 1 and pool is None) or total < min_bytes or active() is not None:
        yield None
        return
    ahead = (ReadAhead(plan, jobs, pool=pool) if pool is None else
             ReadAhead(plan, jobs, pool.ahead_pairs, pool, window_bytes=pool.ahead_bytes))
    try:
        with installed(ahead):  # measure.measure takes its results through readahead.lookup
            yield ahead
    finally:
        ahead.close()


def walk_ahead(dumps: dict, ents: dict, pairs: list[Pair], metric: str, batch_rows, jobs: int | None = None,
               min_bytes: int | None = None, pool=None):
    """:func:`read_ahead` for the walker's pairs: the tolerance each is expected to be measured
    with is the walker's base threshold for the precision seen so far along ``pairs``."""
    from inkling_probe.compare import floor
    from inkling_probe.compare.side import Side

    stack = contextlib.ExitStack()
    stack.enter_context(one_blas_thread())

    side, rtols = Side(), {}
    for p in pairs:
        _, _, precision = side.advance(p.key, p.step, [p.ref.dtype, p.cand.dtype])
        rtols[id(p)] = floor.base_threshold(precision)
    control = ents.get("control") or {}
    plan = plan_of(dumps, pairs, lambda p: rtols[id(p)], metric, batch_rows,
                   lambda p: control.get((p.key, p.step, p.call)) if dumps.get("control") is not None else None)
    stack.enter_context(read_ahead(plan, jobs, MIN_BYTES if min_bytes is None else min_bytes, pool))
    return stack


__getattr__ = module_getattr(__name__, {"lookup": "inkling_probe.compare.readahead.lookup",
                                        "key_of": "inkling_probe.compare.readahead.key_of"})

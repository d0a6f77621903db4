"""compare past one machine: the stateless measurement of each pair on an existing Dask cluster.

``compare(..., cluster="tcp://scheduler:8786")`` (CLI: ``--cluster``) runs what ``--jobs`` runs in
worker processes, :func:`parallel._run` (read both arrays, conform, the float64 reductions), as
``Client.submit`` tasks on the cluster's workers instead (consecutive pairs batched into one task:
:class:`ClusterPool`); the judgement stays in this process, in the walker, and takes a result only
where it would have computed the same thing (parallel.py). So the report is byte-identical to ``--jobs`` (tests/inkling_probe/compare/test_cluster.py).

The workers open the dumps themselves, by path: the dumps must lie on a file system every worker
mounts at the same absolute path. Before any measurement, a relative path is refused, and one small
task on every worker opens each dump; a dump a worker cannot open is refused, naming the worker.

A worker lost mid-run: the scheduler reruns what it was measuring on another worker (up to its
``allowed-failures``); past that, or on any lost connection, the measurement is submitted again
(:data:`RETRIES` times), and if that fails too it is measured here, in the client. Never a lost
verdict; the report's notes name every key measured again and where.

Needs the ``dask`` extra: ``pip install 'inkling-probe[dask]'``.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid

from inkling_probe.errors import ProbeError

CONNECT_TIMEOUT_S = 10.0  # a bad or unreachable scheduler address fails within this (INKLING_PROBE_CLUSTER_TIMEOUT)
TIMEOUT_ENV = "INKLING_PROBE_CLUSTER_TIMEOUT"
RETRIES = 2  # a measurement whose task failed (worker lost past the scheduler's own reruns) is submitted again
BATCH_BYTES = 128 << 20  # one Dask task measures consecutive pairs up to this much data (ClusterPool)
BATCH_JOBS = 256  # ... or this many pairs (one-row decode keys)
MIN_PAIR_BYTES = 1 << 20  # a pair with less to read is measured by the walker: a 500-step decode of 1 KiB
# keys took 2.2x the wall time on a 2-worker cluster of the same 2 cores (the client's CPU 30 s against 23 s
# measuring them itself, the workers' 22 s on top)
INSTALL = "compare --cluster needs Dask distributed: pip install 'inkling-probe[dask]'"


class ClusterError(ProbeError):
    """The cluster cannot be used: distributed missing, scheduler unreachable, dumps not shared."""


def connect_timeout() -> float:
    """:data:`CONNECT_TIMEOUT_S`, or ``INKLING_PROBE_CLUSTER_TIMEOUT`` seconds when set."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ClusterError(f"{TIMEOUT_ENV}={raw!r}: must be a number of seconds > 0")
    return value


def _client(cluster):
    """A distributed.Client for ``cluster`` (an address, or a Client used as it is) and whether we own it."""
    try:
        import distributed
    except ImportError:
        raise ClusterError(INSTALL) from None
    if isinstance(cluster, distributed.Client):
        return cluster, False
    import dask

    timeout = connect_timeout()
    try:  # no log of the last messages sent (Dask keeps 1000 under 1 MB: tasks of many jobs, ~370 KB each)
        with dask.config.set({"distributed.admin.low-level-log-length": 0}):
            return distributed.Client(str(cluster), timeout=timeout, set_as_default=False), True
    except Exception as e:  # unreachable, refused, malformed address: all one line
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ClusterError(f"cannot reach the Dask scheduler at {cluster!r} within {timeout:g} s "
                           f"({TIMEOUT_ENV}): {why}") from None


def _can_open(paths: list[str]) -> dict:
    """On a worker: path -> None when it opens as a dump, else why not (one line)."""
    from inkling_probe.store.dump import Dump

    out = {}
    for p in paths:
        try:
            Dump(p).close()
            out[p] = None
        except Exception as e:
            out[p] = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return out


def check_shared(client, paths: list[str]) -> None:
    """Refuse (:class:`ClusterError`) a relative path, or one some worker cannot open."""
    for p in paths:
        if not os.path.isabs(p):
            raise ClusterError(f"{p}: --cluster needs an absolute path on a file system every worker mounts")
    try:
        seen = client.run(_can_open, paths, on_error="return")
    except Exception as e:
        raise ClusterError(f"the cluster's workers could not be asked to open the dumps: {e}") from None
    if not seen:
        raise ClusterError("the Dask cluster has no workers")
    for worker, result in sorted(seen.items()):
        if isinstance(result, BaseException):
            raise ClusterError(f"worker {worker} could not check the dumps: {type(result).__name__}: {result}")
        for p, why in result.items():
            if why is not None:
                raise ClusterError(f"{p}: worker {worker} cannot open it ({why}); --cluster needs the dumps on a "
                                   "file system every worker mounts at the same path")


_CACHES: dict = {}  # per worker process: run id -> {path: open Dump}


def _on_worker(fn, jobs: list, run: str) -> list:
    """``fn(job, dumps)`` (parallel._run) for each of ``jobs`` on a worker, the dumps open for this
    compare (``run``) only: a cluster outlives a compare, and a dump rewritten at the same path must be
    read anew. Per job ``(True, result)`` or ``(False, "Type: why")``: one job raising loses no other."""
    dumps, out = _CACHES.setdefault(run, {}), []
    for job in jobs:
        try:
            out.append((True, fn(job, dumps)))
        except Exception as e:  # noqa: BLE001 (sent back as text: any exception, picklable or not)
            out.append((False, f"{type(e).__name__}: {_first_line(e)}"))
    return out


def _pair(job) -> str:
    """The pair a job measures, as the notes name it."""
    return f"{job.ref.key} step {job.ref.step} ({job.labels[0]} vs {job.labels[1]})"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _forget(run: str) -> None:
    for d in _CACHES.pop(run, {}).values():
        d.close()


class TaskFailed(Exception):
    """A measurement that raised on its worker (its type and first line)."""


class ClusterPool:
    """Stands in for parallel.ReadAhead's ProcessPoolExecutor: ``submit(fn, job)`` returns a future
    whose ``result()`` is ``fn(job, dumps)`` run on the cluster, submitted again when it failed
    (:data:`RETRIES` times); ``jobs`` is the cluster's worker threads.

    Consecutive submissions travel as one Dask task (a :class:`_Batch`, up to :data:`BATCH_BYTES` of
    data or :data:`BATCH_JOBS` measurements): Dask's own cost, ~7 ms of CPU a task between client,
    scheduler and worker (600 empty tasks on the shared 2-core machine), is as much as measuring a
    16 MiB pair, and far more than a one-row decode key. A batch's Dask future is dropped once its
    results are taken, so the cluster holds only what is in flight, however long the run (every
    future was kept to the end before)."""

    def __init__(self, client):
        self.client = client
        self.run = uuid.uuid4().hex
        self.jobs = max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()))
        self.ahead_pairs, self.ahead_bytes = 2 * self.jobs * BATCH_JOBS, 2 * self.jobs * BATCH_BYTES
        self.min_pair_bytes = MIN_PAIR_BYTES
        self.started = time.time()
        self.names: dict = {}  # dask key -> the pairs it measures, for the notes
        self.events: list[str] = []  # what was measured again, in the order seen
        self.live: set = set()  # batches sent whose results are not all taken
        self.sent = 0  # Dask tasks submitted (the tests count them)
        self.final_notes: list[str] = []  # notes() as the compare ended (connected() sets it)
        self._open = None  # the batch taking submissions, not sent yet
        self._n = itertools.count()

    def submit(self, fn, job) -> "_Member":
        batch = self._open
        if batch is None or batch.fn is not fn:
            if batch is not None:
                batch.send()
            batch = self._open = _Batch(self, fn)
        member = batch.add(job)
        if len(batch.jobs) >= BATCH_JOBS or batch.nbytes >= BATCH_BYTES:
            batch.send()
        return member

    def _submit(self, fn, jobs: list):
        key = f"inkling-measure-{self.run[:8]}-{next(self._n)}"
        self.names[key] = [_pair(j) for j in jobs]
        self.sent += 1
        return self.client.submit(_on_worker, fn, jobs, self.run, key=key, pure=False)

    def shutdown(self, wait: bool = True, cancel_futures: bool = True) -> None:
        for b in list(self.live):
            b.drop()
        self._open = None

    def notes(self) -> list[str]:
        """One line per key the scheduler or this pool measured again, or this process measured."""
        return self._rerun_by_scheduler() + self.events

    def _rerun_by_scheduler(self) -> list[str]:
        try:
            events = self.client.get_events("all")
        except Exception:
            return ["cluster: the scheduler's event log could not be read; a key rerun after a lost worker "
                    "would not be named here"]
        lines = []
        for t, msg in events:
            if t < self.started or not isinstance(msg, dict) or msg.get("action") != "remove-worker":
                continue
            keys = set(msg.get("processing-tasks") or ()) | set(msg.get("lost-computed-tasks") or ())
            for k in sorted(k for k in keys if k in self.names):
                lines += [f"cluster: worker {msg.get('worker')} lost while measuring {what}; "
                          "the scheduler measured it again on another worker" for what in self.names[k]]
        return lines


class _Batch:
    """Consecutive measurements sent as one Dask task (sent when full, or when a result is asked for)."""

    def __init__(self, pool: ClusterPool, fn):
        self.pool, self.fn, self.jobs, self.nbytes = pool, fn, [], 0
        self.future = self.outcomes = self.error = None
        self.waiting = 0  # members not yet taken or cancelled

    def add(self, job) -> "_Member":
        self.jobs.append(job)
        self.nbytes += job.nbytes
        self.waiting += 1
        return _Member(self, len(self.jobs) - 1)

    def send(self) -> None:
        if self.pool._open is self:
            self.pool._open = None
        if self.future is None and self.outcomes is None and self.error is None and self.waiting:
            self.future = self.pool._submit(self.fn, self.jobs)
            self.pool.live.add(self)

    def outcome(self, i: int) -> tuple:
        """Job ``i``'s ``(ok, result or why)``; raises what the task as a whole raised."""
        self.send()
        if self.outcomes is None and self.error is None:
            try:
                self.outcomes = self.future.result()
            except Exception as e:  # the task itself failed (workers lost past the scheduler's reruns)
                self.error = e
            self.future = None  # released: the cluster forgets the task's results
        if self.error is not None:
            raise self.error
        got, self.outcomes[i] = self.outcomes[i], None
        return got

    def settled(self) -> None:
        """One member taken or cancelled: the last one lets the batch go."""
        self.waiting -= 1
        if not self.waiting:
            self.drop()

    def drop(self) -> None:
        if self.future is not None:
            self.future.cancel()
        self.future = self.outcomes = None
        self.pool.live.discard(self)


class _Member:
    """One measurement's future in a batch; ``result()`` submits it again, alone, when it failed."""

    def __init__(self, batch: _Batch, i: int):
        self.batch, self.i, self.settled = batch, i, False

    def result(self):
        job, pool = self.batch.jobs[self.i], self.batch.pool
        what = _pair(job)
        try:
            for attempt in range(RETRIES + 1):
                try:
                    ok, got = self.batch.outcome(self.i)
                    if not ok:
                        raise TaskFailed(got)
                    return got
                except Exception as e:
                    why = e.args[0] if isinstance(e, TaskFailed) else f"{type(e).__name__}: {_first_line(e)}"
                    if attempt == RETRIES:
                        pool.events.append(f"cluster: {what} failed {RETRIES + 1} times on the cluster ({why}); "
                                           "measured in this process")
                        raise
                    pool.events.append(f"cluster: {what} failed on the cluster ({why}); submitted again")
                    self.cancel()
                    self.batch, self.i, self.settled = _Batch(pool, self.batch.fn), 0, False
                    self.batch.add(job)
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Taken or not wanted: the batch lets its task go once every member is."""
        if not self.settled:
            self.settled = True
            self.batch.settled()


@contextlib.contextmanager
def connected(cluster, paths: list[str]):
    """A :class:`ClusterPool` on ``cluster`` (address or distributed.Client) once every worker can
    open ``paths``; None when ``cluster`` is None. Its ``notes`` are final when the body has run."""
    if cluster is None:
        yield None
        return
    client, owned = _client(cluster)
    pool = None
    try:
        check_shared(client, paths)
        pool = ClusterPool(client)
        yield pool
    finally:
        if pool is not None:
            pool.final_notes = pool.notes()
            with contextlib.suppress(Exception):
                client.run(_forget, pool.run)
        if owned:
            client.close()

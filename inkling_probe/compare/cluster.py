"""compare past one machine: the stateless measurement of each pair on an existing Dask cluster.

``compare(..., cluster="tcp://scheduler:8786")`` (CLI: ``--cluster``) runs what ``--jobs`` runs in
worker processes, :func:`parallel._run` (read both arrays, conform, the float64 reductions), as
``Client.submit`` tasks on the cluster's workers instead; the judgement stays in this process, in
the walker, and takes a result only where it would have computed the same thing (parallel.py). So
the report is byte-identical to ``--jobs`` (tests/inkling_probe/compare/test_cluster.py).

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
    timeout = connect_timeout()
    try:
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


def _on_worker(fn, job, run: str):
    """``fn(job, dumps)`` on a worker (parallel._run), its dumps open for this compare (``run``) only:
    a cluster outlives a compare, and a dump rewritten at the same path must be read anew."""
    return fn(job, _CACHES.setdefault(run, {}))


def _forget(run: str) -> None:
    for d in _CACHES.pop(run, {}).values():
        d.close()


class ClusterPool:
    """Stands in for parallel.ReadAhead's ProcessPoolExecutor: ``submit(fn, job)`` runs
    ``fn(job, dumps)`` on the cluster and returns a future whose ``result()`` submits again when the
    task failed (:data:`RETRIES` times); ``jobs`` is the cluster's worker threads."""

    def __init__(self, client):
        self.client = client
        self.run = uuid.uuid4().hex
        self.jobs = max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()))
        self.started = time.time()
        self.names: dict = {}  # dask key -> the pair it measures, for the notes
        self.events: list[str] = []  # what was measured again, in the order seen
        self.futures: list = []
        self.final_notes: list[str] = []  # notes() as the compare ended (connected() sets it)
        self._n = itertools.count()

    def submit(self, fn, job) -> "_Retrying":
        f = _Retrying(self, fn, job)
        self.futures.append(f)
        return f

    def _submit(self, fn, job):
        key = f"inkling-measure-{self.run[:8]}-{next(self._n)}"
        self.names[key] = f"{job.ref.key} step {job.ref.step} ({job.labels[0]} vs {job.labels[1]})"
        return self.client.submit(_on_worker, fn, job, self.run, key=key, pure=False)

    def shutdown(self, wait: bool = True, cancel_futures: bool = True) -> None:
        for f in self.futures:
            f.cancel()
        self.futures.clear()

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
                lines.append(f"cluster: worker {msg.get('worker')} lost while measuring {self.names[k]}; "
                             "the scheduler measured it again on another worker")
        return lines


class _Retrying:
    """A Dask future of one measurement that submits itself again when its task fails."""

    def __init__(self, pool: ClusterPool, fn, job):
        self.pool, self.fn, self.job = pool, fn, job
        self.future = pool._submit(fn, job)

    def result(self):
        for attempt in range(RETRIES + 1):
            try:
                return self.future.result()
            except Exception as e:
                what = self.pool.names.get(self.future.key, self.future.key)
                why = (str(e).strip().splitlines() or [type(e).__name__])[0]
                if attempt == RETRIES:
                    self.pool.events.append(f"cluster: {what} failed {RETRIES + 1} times on the cluster "
                                            f"({type(e).__name__}: {why}); measured in this process")
                    raise
                self.pool.events.append(f"cluster: {what} failed on the cluster ({type(e).__name__}: {why}); "
                                        "submitted again")
                self.future = self.pool._submit(self.fn, self.job)

    def cancel(self) -> None:
        self.future.cancel()


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

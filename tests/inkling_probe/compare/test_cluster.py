"""compare --cluster (compare/cluster.py): measurement on a Dask cluster's workers, judgement here.
A local cluster of 2 worker processes stands in for a real one: the report is byte-identical to
--jobs; a worker that dies on a key has that key measured again, and the report says so; dumps the
workers cannot open, relative paths and unreachable schedulers are one line, exit 2."""
import functools
import json
import os
import sys
import time

import pytest

distributed = pytest.importorskip("distributed")

from click.testing import CliRunner  # noqa: E402

from inkling_probe.cli import group as main  # noqa: E402
from inkling_probe.compare import cluster, compare, parallel  # noqa: E402

from . import test_parallel  # noqa: E402  (its toy routed net: a decision, rows set aside, a NaN key, a fault)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client():
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import this file
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as lc, distributed.Client(lc) as c:
        yield c


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    from dumps import write

    root = tmp_path_factory.mktemp("cluster")
    steps = test_parallel._steps
    return (str(write(root / "ref", steps(False, 0.0, False))), str(write(root / "cand", steps(True, 1e-3, True))),
            str(write(root / "ctl", steps(False, 1e-3, False))))


def _doc(rep) -> str:
    return json.dumps(rep.to_dict(), sort_keys=True, default=str)


def test_the_cluster_gives_the_jobs_report(client, trio, monkeypatch):
    ref, cand, ctl = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)  # small dumps: --jobs reads ahead anyway
    monkeypatch.setattr(cluster, "MIN_PAIR_BYTES", 0)  # and the cluster measures small pairs too
    taken = []
    real = parallel.ReadAhead.take
    monkeypatch.setattr(parallel.ReadAhead, "take", lambda self, key: taken.append(real(self, key)) or taken[-1])
    for kw in ({}, {"control": ctl}):
        jobs = compare(ref, cand, jobs=2, decisions=["*.topk_idx"], **kw)
        taken.clear()
        on = compare(ref, cand, cluster=client.scheduler.address, decisions=["*.topk_idx"], **kw)
        value_rows = [r for r in on.rows if not r.decision and r.status != "exact"]
        assert sum(t is not None for t in taken) >= len(value_rows) - 1  # the cluster's workers measured them
        assert _doc(jobs) == _doc(on)
        assert any("set aside" in (r.note or "") for r in on.rows) and on.diverged


def test_many_small_keys_travel_in_batches_and_are_let_go(client, tmp_path, monkeypatch):
    """Dask's own cost is paid per task, not per key, and the cluster holds only what is in flight: a
    task per key (or futures kept to the end) grows with the run, as over a long decode."""
    import torch

    from dumps import write

    gen = torch.Generator().manual_seed(0)
    steps = [[(f"layers.{k}.out", torch.randn(1, 8, generator=gen)) for k in range(4)] for _ in range(50)]
    ref = write(tmp_path / "ref", steps)
    cand = write(tmp_path / "cand", [[(k, t * (1 + 1e-3)) for k, t in items] for items in steps])
    monkeypatch.setattr(cluster, "BATCH_JOBS", 8)
    monkeypatch.setattr(cluster, "MIN_PAIR_BYTES", 0)
    pools, held = [], []
    monkeypatch.setattr(cluster, "ClusterPool", lambda c, real=cluster.ClusterPool: pools.append(real(c)) or pools[-1])
    real_take = parallel.ReadAhead.take

    def take(self, key):
        held.append(sum(str(k).startswith("inkling-measure-") for k in list(client.refcount)))
        return real_take(self, key)

    monkeypatch.setattr(parallel.ReadAhead, "take", take)
    on = compare(ref, cand, cluster=client, explain=False)
    assert _doc(on) == _doc(compare(ref, cand, jobs=1, explain=False))
    measured = sum(1 for r in on.rows if r.status != "exact")
    pool = pools[0]
    assert measured == 200 and pool.sent <= measured // 8 + 2, pool.sent  # one task a key: 200
    assert len(held) == 200 and max(held) <= pool.ahead_pairs // 8 + 1, max(held)  # futures kept: up to 25


def test_a_client_we_start_keeps_no_log_of_the_tasks_it_sent(client):
    """Dask logs each comm's last 1000 messages under 1 MB: a task of 256 one-row jobs is ~370 KB, so
    a long run held ~370 MB of them in the client."""
    c, owned = cluster._client(client.scheduler.address)
    try:
        assert owned and c.scheduler_comm.recent_message_log.maxlen == 0
    finally:
        c.close()
    with distributed.Client(client.scheduler.address, set_as_default=False) as plain:  # Dask's default
        assert plain.scheduler_comm.recent_message_log.maxlen > 0


def test_pairs_too_small_for_the_trip_are_measured_here(client, trio, monkeypatch):
    ref, cand, _ = trio
    pools = []
    monkeypatch.setattr(cluster, "ClusterPool", lambda c, real=cluster.ClusterPool: pools.append(real(c)) or pools[-1])
    on = compare(ref, cand, cluster=client, decisions=["*.topk_idx"])
    assert pools[0].sent == 0  # every key of the toy is a few KiB
    assert _doc(on) == _doc(compare(ref, cand, jobs=1, decisions=["*.topk_idx"]))


def _exit_once(marker: str, key: str, job, dumps=None):
    """parallel._run, except that the worker process dies the first time it is given ``key``."""
    if job.ref.key == key and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return parallel._run(job, dumps)


def test_a_worker_lost_mid_run_is_retried_and_named(client, trio, monkeypatch, tmp_path):
    ref, cand, _ = trio
    plain = compare(ref, cand, jobs=1, decisions=["*.topk_idx"])
    marker = str(tmp_path / "died")
    monkeypatch.setattr(cluster, "MIN_PAIR_BYTES", 0)  # the toy's pairs go to the cluster
    monkeypatch.setattr(parallel, "_run", functools.partial(_exit_once, marker, "layers.2.resid"))
    on = compare(ref, cand, cluster=client, decisions=["*.topk_idx"])
    assert os.path.exists(marker)  # a worker did die on it
    lost = [n for n in on.notes if n.startswith("cluster:")]
    assert any("layers.2.resid" in n for n in lost), on.notes  # and what else the dead worker held
    assert all("measured it again" in n for n in lost), on.notes
    on.notes = [n for n in on.notes if not n.startswith("cluster:")]
    assert _doc(on) == _doc(plain)  # every verdict kept
    client.wait_for_workers(2, timeout=30)  # the nanny restarted it, for the tests after


def test_a_task_failing_everywhere_is_measured_here(client, trio, monkeypatch):
    ref, cand, _ = trio
    plain = compare(ref, cand, jobs=1, decisions=["*.topk_idx"])
    monkeypatch.setattr(parallel, "_run", test_parallel._explode)  # every task raises in its worker
    monkeypatch.setattr(cluster, "RETRIES", 1)
    monkeypatch.setattr(cluster, "MIN_PAIR_BYTES", 0)
    on = compare(ref, cand, cluster=client, decisions=["*.topk_idx"])
    notes = [n for n in on.notes if n.startswith("cluster:")]
    assert any("submitted again" in n for n in notes) and any("measured in this process" in n for n in notes)
    on.notes = [n for n in on.notes if not n.startswith("cluster:")]
    assert _doc(on) == _doc(plain)


def test_cli_cluster_matches_jobs(client, trio):
    ref, cand, _ = trio
    run = CliRunner().invoke
    a = run(main, ["compare", ref, cand, "--decision", "*.topk_idx", "--json", "-j", "2"])
    b = run(main, ["compare", ref, cand, "--decision", "*.topk_idx", "--json", "--cluster", client.scheduler.address])
    assert a.exit_code == b.exit_code == 1, b.output
    assert a.output == b.output


def _one_line_exit_2(args, **kw):
    r = CliRunner().invoke(main, ["compare", *args], **kw)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def test_unreachable_scheduler_is_one_line_in_bounded_time(trio):
    ref, cand, _ = trio
    t0 = time.perf_counter()
    line = _one_line_exit_2([ref, cand, "--cluster", "tcp://127.0.0.1:9"], env={cluster.TIMEOUT_ENV: "2"})
    assert "cannot reach the Dask scheduler" in line and time.perf_counter() - t0 < 15
    assert "cannot reach" in _one_line_exit_2([ref, cand, "--cluster", "nonsense://x"], env={cluster.TIMEOUT_ENV: "2"})


def test_dumps_the_workers_cannot_read_are_refused(client, trio, tmp_path, monkeypatch):
    ref, cand, _ = trio
    addr = client.scheduler.address
    monkeypatch.chdir(os.path.dirname(ref))
    assert "absolute path" in _one_line_exit_2([os.path.basename(ref), cand, "--cluster", addr])
    monkeypatch.setattr(cluster, "_can_open", _nothing_opens)
    assert "cannot open it" in _one_line_exit_2([ref, cand, "--cluster", addr])


def _nothing_opens(paths):
    return {p: "No such file or directory" for p in paths}


def test_without_distributed_the_cli_says_how_to_install(trio, monkeypatch):
    ref, cand, _ = trio
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    assert cluster.INSTALL in _one_line_exit_2([ref, cand, "--cluster", "tcp://127.0.0.1:9"])

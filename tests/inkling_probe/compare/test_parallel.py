"""compare with worker processes reading ahead (compare/parallel.py): the report is the same for
any number of jobs, rows set aside after a routing change included; the workers did the work."""
import json

import pytest
import torch

from inkling_probe.compare import compare, parallel

from dumps import write

G = torch.Generator().manual_seed(7)


def randn(*s):
    return torch.randn(*s, generator=G)


def _steps(fault: bool, noise: float, flip: bool, dtype=torch.float32):
    """Two steps of a toy routed net: a decision, rows after it, a NaN key, a planted fault."""
    gen = torch.Generator().manual_seed(3)
    out = []
    for step in range(2):
        t = 16
        x = torch.randn(t, 32, generator=gen)
        idx = torch.randint(0, 8, (t, 2), generator=gen)
        if flip and step == 1:
            idx[5] = (idx[5] + 1) % 8
        items = [("embed", x.to(dtype)), ("layers.0.mlp.topk_idx", idx)]
        h = x
        for i in range(4):
            h = h + torch.tanh(h) * 0.5
            y = h + noise * torch.randn(h.shape, generator=torch.Generator().manual_seed(10 * i + step))
            if fault and i == 2:
                y = y * 1.05
            items.append((f"layers.{i}.resid", y.to(dtype)))
        items.append(("logits", torch.where(h > 3, torch.nan, h).to(dtype)))
        out.append(items)
    return out


def _doc(rep) -> str:
    return json.dumps(rep.to_dict(), sort_keys=True, default=str)


@pytest.fixture()
def trio(tmp_path):
    ref = write(tmp_path / "ref", _steps(False, 0.0, False))
    ctl = write(tmp_path / "ctl", _steps(False, 1e-3, False))
    cand = write(tmp_path / "cand", _steps(True, 1e-3, True))
    return ref, cand, ctl


def test_jobs_give_the_same_report(trio, monkeypatch):
    ref, cand, ctl = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)  # small dumps: read ahead anyway
    taken = []
    real = parallel.ReadAhead.take

    def counting(self, key):
        got = real(self, key)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(parallel.ReadAhead, "take", counting)
    for kw in ({}, {"control": ctl}):
        one = compare(ref, cand, jobs=1, decisions=["*.topk_idx"], **kw)
        assert not taken  # one job: nothing runs ahead
        two = compare(ref, cand, jobs=2, decisions=["*.topk_idx"], **kw)
        value_rows = [r for r in two.rows if not r.decision and r.status != "exact"]
        assert sum(taken) >= len(value_rows) - 1, (taken, len(value_rows))  # the workers measured them
        assert _doc(one) == _doc(two)
        assert any("set aside" in (r.note or "") for r in two.rows)  # the stateful path was exercised
        assert two.diverged and one.culprit.key == two.culprit.key
        taken.clear()


def test_a_wrong_guess_is_measured_in_the_main_process(trio, monkeypatch):
    """A result computed with other settings than the walker's is never used."""
    ref, cand, _ = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    real_plan = parallel.plan_of
    monkeypatch.setattr(parallel, "plan_of", lambda d, p, rtol_of, *a: real_plan(d, p, lambda _: 0.5, *a))
    one = compare(ref, cand, jobs=1, decisions=["*.topk_idx"])
    two = compare(ref, cand, jobs=2, decisions=["*.topk_idx"])
    assert _doc(one) == _doc(two)


def test_small_dumps_start_no_workers(trio, monkeypatch):
    ref, cand, _ = trio
    monkeypatch.setattr(parallel, "ReadAhead", None)  # would fail if started
    assert compare(ref, cand, jobs=4, decisions=["*.topk_idx"]).rows


def test_a_failing_worker_falls_back_to_the_main_process(trio, monkeypatch):
    ref, cand, _ = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "_run", _explode)  # every job fails in its worker
    one = compare(ref, cand, jobs=1, decisions=["*.topk_idx"])
    two = compare(ref, cand, jobs=2, decisions=["*.topk_idx"])
    assert _doc(one) == _doc(two)


def _explode(job):
    raise MemoryError("worker out of memory")


def test_blas_runs_on_one_thread_during_the_walk_and_is_restored():
    import numpy  # noqa: F401

    getters = [getattr(lib, n) for lib in parallel._blas_libs() for n in parallel._BLAS_GETTERS if hasattr(lib, n)]
    if not getters:
        pytest.skip("no BLAS found in this process")
    before = [int(g()) for g in getters]
    with parallel.one_blas_thread():
        assert [int(g()) for g in getters] == [1] * len(getters)
    assert [int(g()) for g in getters] == before


def test_one_job_reads_ahead_in_a_thread_and_reports_the_same(trio, monkeypatch):
    """compare/prefetch.py: with one job the next arrays are read in a thread; same report."""
    from inkling_probe.compare import prefetch

    ref, cand, ctl = trio
    for kw in ({}, {"control": ctl}):
        monkeypatch.setattr(parallel, "MIN_BYTES", 1 << 60)  # nothing read ahead
        plain = compare(ref, cand, jobs=1, decisions=["*.topk_idx"], **kw)
        monkeypatch.setattr(parallel, "MIN_BYTES", 0)
        monkeypatch.setattr(parallel, "PREFETCH_MIN_BYTES", 0)
        monkeypatch.setattr(parallel, "THREAD_READ_AHEAD", True)
        got = []
        real = prefetch.Prefetch.take

        def counting(self, dump, e):
            array = real(self, dump, e)
            got.append(array is not None)
            return array

        monkeypatch.setattr(prefetch.Prefetch, "take", counting)
        ahead = compare(ref, cand, jobs=1, decisions=["*.topk_idx"], **kw)
        value_rows = [r for r in ahead.rows if not r.decision and r.status != "exact"]
        assert sum(got) >= 2 * len(value_rows) - 2, (got, len(value_rows))  # the thread read them
        assert _doc(plain) == _doc(ahead) and prefetch._ACTIVE is None
        monkeypatch.undo()


def test_prefetch_skips_what_the_walker_never_asks_for(trio):
    """Items walked past are dropped (their memory too); an item out of order is not taken."""
    from inkling_probe import open as open_dump
    from inkling_probe.compare import prefetch
    from inkling_probe.compare.align import entries

    ref, _, _ = trio
    d = open_dump(ref)
    ents = list(entries(d, None, "reference").values())
    with prefetch.prefetching([(d, e) for e in ents]) as p:
        assert prefetch.take(d, ents[3]) is not None  # 0..2 skipped
        assert prefetch.take(d, ents[1]) is None  # behind: the walker reads it itself
        assert prefetch.take(d, ents[4]) is not None and all(j > 4 for j in p.ready)
    assert prefetch._ACTIVE is None and not p.thread.is_alive()

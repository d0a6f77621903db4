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

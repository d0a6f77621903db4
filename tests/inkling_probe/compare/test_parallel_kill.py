"""compare --jobs survives its workers' deaths (issue 42: one worker killed, as the OOM killer would,
ended in exit 3 BrokenProcessPool, no verdict, 5 of 5). The kill harness: a thread SIGKILLs read-ahead
workers at seeded random moments; every run gives a verdict, the one job's, and the report says what
was measured again."""
import json
import os
import random
import signal
import threading

import pytest
from click.testing import CliRunner

from inkling_probe.cli.compare import command as compare_cli
from inkling_probe.compare import compare, parallel, readahead

from .test_parallel import trio  # noqa: F401  (the fixture: a reference, a faulty candidate, a control)

DIED = "jobs: a worker process died"


class Killer(threading.Thread):
    """SIGKILLs up to ``kills`` live workers of the running read-ahead, the first as soon as one
    exists, the next after a seeded random pause (0 to 150 ms)."""

    def __init__(self, seed: int, kills: int):
        super().__init__(daemon=True)
        self.rng, self.kills, self.killed, self.done = random.Random(seed), kills, [], threading.Event()

    def run(self):
        while not self.done.is_set() and len(self.killed) < self.kills:
            pool = getattr(readahead.active(), "pool", None)
            alive = [p for p in list(getattr(pool, "_processes", None) or {}) if p not in self.killed]
            if not alive:
                self.done.wait(0.002)
                continue
            pid = self.rng.choice(alive)
            try:
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
            except ProcessLookupError:
                continue
            self.done.wait(self.rng.uniform(0, 0.15))

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join()


def _verdict(rep) -> tuple[str, list[str]]:
    """The report without its notes (as JSON), and the notes but the one about the workers."""
    d = rep.to_dict()
    notes = [n for n in d.pop("notes", []) if not n.startswith(DIED)]
    return json.dumps(d, sort_keys=True, default=str), notes


@pytest.mark.parametrize("seed", range(6))
def test_workers_killed_at_random_give_the_one_jobs_verdict(trio, monkeypatch, seed):  # noqa: F811
    ref, cand, ctl = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)  # small dumps: read ahead anyway
    kw = dict(decisions=["*.topk_idx"], control=ctl if seed % 2 else None)
    one = compare(ref, cand, jobs=1, **kw)
    with Killer(seed, kills=1 + seed % 3) as killer:
        two = compare(ref, cand, jobs=2, **kw)
    assert killer.killed, "the harness killed no worker"
    assert _verdict(two) == _verdict(one)
    assert two.diverged and two.culprit.key == one.culprit.key
    died = [n for n in two.notes if n.startswith(DIED)]
    assert len(died) <= 1 and all("the verdict is the one job's" in n for n in died), two.notes


def test_every_fresh_pool_killed_leaves_the_rest_to_this_process(trio, monkeypatch):  # noqa: F811
    ref, cand, _ = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    one = compare(ref, cand, jobs=1, decisions=["*.topk_idx"])
    with Killer(0, kills=parallel.MAX_POOLS * 2):  # more than the pools there may be
        two = compare(ref, cand, jobs=2, decisions=["*.topk_idx"])
    assert _verdict(two) == _verdict(one)


def test_cli_reports_the_death_and_keeps_its_exit_code(trio, monkeypatch):  # noqa: F811
    ref, cand, _ = trio
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    args = [str(ref), str(cand), "--decision", "*.topk_idx", "--no-explain"]
    one = CliRunner().invoke(compare_cli, args + ["--jobs", "1"], env={"COLUMNS": "200"})
    with Killer(1, kills=1):
        two = CliRunner().invoke(compare_cli, args + ["--jobs", "2"], env={"COLUMNS": "200"})
    assert one.exit_code == two.exit_code == 1, (one.output, two.output)
    assert "Traceback" not in two.output and "BrokenProcessPool" not in two.output, two.output
    assert DIED in two.output, two.output

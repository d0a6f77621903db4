"""A dump belongs to one run: run ids in segment names, a per-rank lock, overwrite clearing every
rank of the old run, and a reader that refuses a folder mixing runs or world sizes."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store import folder, schema

from dumps import write, write_tp


def segments(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".h5"))


def test_segment_names_and_attributes_carry_one_run_id(tmp_path):
    write_tp(tmp_path / "d", [[[("x", torch.ones(4))]]] * 2)
    names = segments(tmp_path / "d")
    runs = {schema.parse_segment_name(n)[2] for n in names}
    assert len(names) == 2 and len(runs) == 1 and len(runs.pop()) == 12
    d = inkling_probe.open(tmp_path / "d")
    assert d.world_size == 2 and {s.run_id for s in d.segments} == {d.run_id}


def test_run_id_is_shared_by_a_launch_and_differs_between_launches():
    env = {"TORCHELASTIC_RUN_ID": "abc"}
    assert folder.run_id(env, 2) == folder.run_id(env, 2) != folder.run_id(env, 1)
    assert folder.run_id({}, 1) != folder.run_id({}, 1)  # a lone process: a fresh id each time
    assert folder.run_id({"MASTER_PORT": "1"}, 2) != folder.run_id({"MASTER_PORT": "2"}, 2)
    assert folder.run_id({}, 4, explicit="job7") == folder.run_id({"SLURM_JOB_ID": "9"}, 4, explicit="job7")


def test_tp2_then_tp1_with_overwrite_keeps_no_stale_rank(tmp_path):
    """The issue's case: re-recording a TP=2 folder at TP=1 must not merge rank 1's old shard."""
    path = tmp_path / "d"
    write_tp(path, [[[("w", torch.zeros(4, 4), {"shard": "concat", "dim": 1})]]] * 2)
    write(path, [[("w", torch.ones(4, 8), {"shard": "concat", "dim": 1})]], overwrite=True)
    d = inkling_probe.open(path)
    assert d.world_size == 1 and d.ranks == [0] and {s.rank for s in d.segments} == {0}
    assert tuple(d.tensor("w").shape) == (4, 8) and bool((d.tensor("w") == 1).all())


def test_other_runs_files_without_overwrite_stop_at_start(tmp_path):
    path = tmp_path / "d"
    write_tp(path, [[[("w", torch.zeros(2))]]] * 2)
    before = segments(path)
    with pytest.raises(DumpError, match="already holds a dump .*INKLING_PROBE_OVERWRITE=1"):
        write(path, [[("w", torch.ones(2))]], rank=1, world=2, run="other")
    assert segments(path) == before


def test_reader_refuses_a_folder_mixing_runs_or_world_sizes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_tp(a, [[[("w", torch.zeros(4, 4), {"shard": "concat", "dim": 1})]]] * 2)
    write(b, [[("w", torch.ones(4, 8), {"shard": "concat", "dim": 1})]])
    for n in segments(a):  # planted by hand: a TP=1 run's rank 0 beside a TP=2 run's rank 1
        if n.startswith("rank00000"):
            os.remove(a / n)
    (n,) = segments(b)
    os.replace(b / n, a / n)
    with pytest.raises(DumpError) as e:
        inkling_probe.open(a)
    message = str(e.value)
    assert "\n" not in message and "mixes 2 runs" in message
    assert "world size 1: ranks [0]" in message and "world size 2: ranks [1]" in message


def test_schema_1_files_beside_schema_2_are_a_mixed_run(tmp_path):
    path = tmp_path / "d"
    write(path, [[("x", torch.ones(2))]])
    (name,) = segments(path)
    shutil.copy(path / name, path / "rank00000-seg000005.h5")  # looks like a v1 segment of the same rank
    import h5py
    with h5py.File(path / "rank00000-seg000005.h5", "r+") as f:
        del f.attrs["run_id"]
    with pytest.raises(DumpError, match=r"mixes 2 runs \(run \(schema 1\)"):
        inkling_probe.open(path)


LOCK_HOLDER = """
import sys, time
from inkling_probe.store.folder import prepare
lock = prepare(sys.argv[1], 0, "aaaaaaaaaaaa", False)
print("locked", flush=True)
time.sleep(30)
"""


def test_same_rank_same_folder_twice_the_second_stops_with_one_line(tmp_path):
    """Two processes recording the same rank into one folder: the second is refused at start."""
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(tmp_path / "d")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DumpError) as e:
            write(tmp_path / "d", [[("x", torch.ones(2))]])
        assert f"rank 0 is being recorded by another process (pid {holder.pid})" in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    write(tmp_path / "d", [[("x", torch.ones(2))]])  # the lock went with the process
    assert inkling_probe.open(tmp_path / "d").keys() == ["x"]


def test_overwrite_does_not_pull_files_from_under_a_running_rank_of_another_run(tmp_path):
    path = tmp_path / "d"
    write_tp(path, [[[("x", torch.ones(2))]]] * 2)
    lock = folder.RankLock(str(path), 1, "bbbbbbbbbbbb")  # rank 1 of another run is recording
    try:
        with pytest.raises(DumpError, match="rank 1 of another run is still recording"):
            write(path, [[("x", torch.ones(2))]], overwrite=True)
    finally:
        lock.release()


@pytest.mark.slow
def test_two_writers_started_together_one_wins_and_the_dump_is_whole(tmp_path):
    """The issue's race (process writer): both start at once; exactly one records, the other stops
    with a one-line error, and what is on disk reads back as written."""
    script = ("import sys, torch, inkling_probe\n"
              "v = float(sys.argv[1])\n"
              "for s in range(3):\n"
              "    inkling_probe.step(); inkling_probe.probe('x', torch.full((300, 300), v))\n")
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), "INKLING_PROBE_WRITER": "process"}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(v)], env=env, stderr=subprocess.PIPE,
                              text=True) for v in (1, 2)]
    results = [(p.wait(60), p.stderr.read()) for p in procs]
    ok = [i for i, (code, _) in enumerate(results) if code == 0]
    assert len(ok) == 1, results
    code, err = results[1 - ok[0]]
    assert code != 0 and err.count("\n") == 1 and err.startswith("inkling-probe: ")
    d = inkling_probe.open(tmp_path / "d")
    assert d.steps("x") == [0, 1, 2]
    assert all(bool((d.tensor("x", s) == ok[0] + 1).all()) for s in range(3))


RANK_SCRIPT = """
import os, sys, torch, torch.distributed as dist, inkling_probe
rank = int(os.environ["RANK"])
if sys.argv[1] == "dist":
    dist.init_process_group("gloo", rank=rank, world_size=2)
for s in range(2):
    inkling_probe.step(); inkling_probe.probe("x", torch.full((4,), float(10 * rank + s)))
inkling_probe.sink.stop()
if sys.argv[1] == "dist":
    dist.barrier(); dist.destroy_process_group()
"""


def _launch_under_separate_timeouts(path, how: str, port: int, overwrite: bool = False):
    """Two ranks, each under its own ``timeout`` (its own parent and process group)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INKLING_PROBE", "TORCHELASTIC", "SLURM"))}
    env.update(INKLING_PROBE=str(path), INKLING_PROBE_WRITER="inline", WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), INKLING_PROBE_OVERWRITE=str(int(overwrite)))
    procs = [subprocess.Popen(["timeout", "120", sys.executable, "-c", RANK_SCRIPT, how],
                              env={**env, "RANK": str(r)}, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    return [(p.wait(150), p.stderr.read()) for p in procs]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["dist", "env"])
def test_ranks_under_separate_timeout_processes_are_one_run(tmp_path, how):
    """The issue's case: each rank under its own ``timeout`` gave two runs ("mixes 2 runs"), and
    OVERWRITE=1 then let a later rank delete an earlier one's data. With the process group up, the
    ranks agree through its store; without it, through their login session."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "d"
    for overwrite in (False, True):
        results = _launch_under_separate_timeouts(path, how, port, overwrite)
        assert [code for code, _ in results] == [0, 0], results
        d = inkling_probe.open(path)
        assert d.world_size == 2 and d.ranks == [0, 1] and len({s.run_id for s in d.segments}) == 1
        assert d.steps("x") == [0, 1]
        assert [float(d.tensor("x", step=1, rank=r)[0]) for r in (0, 1)] == [1.0, 11.0]


def test_overwrite_with_a_folder_named_like_a_segment_is_one_line(tmp_path):
    """Was a traceback (IsADirectoryError from os.remove)."""
    path = tmp_path / "d"
    write(path, [[("x", torch.ones(2))]])
    planted = path / "rank00000-seg000009-aaaaaaaaaaaa.h5"
    planted.mkdir()
    (planted / "keep").write_text("mine")
    with pytest.raises(DumpError) as e:
        write(path, [[("x", torch.ones(2))]], overwrite=True)
    assert str(e.value) == (f"{planted}: a directory named like a segment; INKLING_PROBE_OVERWRITE removes only "
                            "files: move it away or record into another folder")
    assert (planted / "keep").read_text() == "mine"


def test_overwrite_through_the_environment_with_such_a_folder_exits_with_one_line(tmp_path):
    path = tmp_path / "d"
    (path / "rank00000-seg000000-aaaaaaaaaaaa.h5").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_PROBE")}
    env.update(INKLING_PROBE=str(path), INKLING_PROBE_OVERWRITE="1", INKLING_PROBE_WRITER="inline")
    r = subprocess.run([sys.executable, "-c", "import torch, inkling_probe\ninkling_probe.probe('x', torch.ones(2))"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "a directory named like a segment" in r.stderr


def test_run_id_sources_in_order():
    env = {"MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert folder.run_id(env, 2, launch="tok") == folder.run_id({}, 2, launch="tok") != folder.run_id(env, 2, launch="x")
    assert folder.run_id({**env, "TORCHELASTIC_RUN_ID": "abc"}, 2, launch="tok") == folder.run_id(
        {"TORCHELASTIC_RUN_ID": "abc"}, 2)  # the launcher's own id comes before the rendezvous token
    assert folder.run_id(env, 2) == folder.run_id(env, 2)  # same session, same rendezvous address
    assert folder.launcher_identity({"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2"}) == "slurm:9.2"

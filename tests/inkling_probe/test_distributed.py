"""Distributed metadata: real ranks (torch.multiprocessing spawn, gloo) record shards of known global
tensors into one dump; the reader reassembles the global view exactly and keeps each rank's shard."""
import json
import os
import socket

import h5py
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from click.testing import CliRunner

import inkling_probe
from inkling_probe.errors import DumpError

pytestmark = pytest.mark.slow

STEPS = 2


def global_concat(step, world):
    """[4, 2*world] float32; rank r holds columns 2r, 2r+1 (concat along dim 1)."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(4, 2 * world, generator=g)


def partial_part(step, rank):
    """Rank r's bf16 partial sum [3, 5]; the global value is the sum over ranks."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return (torch.randn(3, 5, generator=g) * 10).bfloat16()


def global_partial(step, world):
    """The partial sums added in float64 and rounded once to bf16."""
    return sum(partial_part(step, r).double() for r in range(world)).bfloat16()


def replicated(step):
    return torch.arange(6, dtype=torch.int64).reshape(2, 3) * (step + 1)


def _worker(rank, world, port, dumps):
    """One rank: join the gloo group, then record STEPS steps into each (path, env) of ``dumps``."""
    from inkling_probe import sink

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for path, env in dumps:
            os.environ.update({"INKLING_PROBE": path, **env})
            assert sink.configure_from_env()
            for step in range(STEPS):
                inkling_probe.step()
                shard = global_concat(step, world)[:, 2 * rank: 2 * rank + 2]
                inkling_probe.probe("concat", shard, shard="concat", dim=-1)  # dim -1: stored as 1
                part = partial_part(step, rank)
                inkling_probe.probe("partial", part, shard="partial")
                reduced = part.double()
                dist.all_reduce(reduced)  # the real collective the reader must agree with
                inkling_probe.probe("reduced", reduced.bfloat16())
                inkling_probe.probe("replicated", replicated(step))
            sink.stop()
            for var in ("INKLING_PROBE", *env):
                del os.environ[var]
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(world, dumps):
    mp.spawn(_worker, args=(world, _free_port(), dumps), nprocs=world, join=True)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """A 2-rank run recording twice: every rank (writer process), and rank 0 only (inline)."""
    root = tmp_path_factory.mktemp("dist2")
    all_ranks, rank0 = str(root / "all"), str(root / "rank0")
    _spawn(2, [(all_ranks, {}), (rank0, {"INKLING_PROBE_RANKS": "0", "INKLING_PROBE_WRITER": "inline"})])
    return all_ranks, rank0


def _check_global_and_shards(path, world):
    d = inkling_probe.open(path)
    assert d.world_size == world and d.ranks == list(range(world))
    for step in range(STEPS):
        g = global_concat(step, world)
        assert torch.equal(d.tensor("concat", step), g)
        for r in range(world):
            assert torch.equal(d.tensor("concat", step, rank=r), g[:, 2 * r: 2 * r + 2])
        shards = d.shards("partial", step)
        assert sorted(shards) == list(range(world))
        assert all(torch.equal(shards[r], partial_part(step, r)) for r in range(world))
        p = d.tensor("partial", step)
        assert p.dtype == torch.bfloat16 and torch.equal(p, global_partial(step, world))
        assert torch.equal(p, d.tensor("reduced", step))  # equals gloo's float64 all_reduce
        assert torch.equal(d.tensor("replicated", step), replicated(step))
    return d


def test_two_ranks_reassemble_to_the_known_global_tensors(two_ranks):
    _check_global_and_shards(two_ranks[0], 2)


def test_index_rows_carry_rank_shard_and_dim(two_ranks):
    d = inkling_probe.open(two_ranks[0])
    rows = {(r["key"], r["step"], r["rank"]): r for r in d.index}
    assert len(rows) == len(d.index) == 4 * STEPS * 2
    for step in range(STEPS):
        for rank in range(2):
            c, p, x = (rows[(k, step, rank)] for k in ("concat", "partial", "replicated"))
            assert (c["shard"], c["dim"], c["shape"]) == ("concat", 1, (4, 2))
            assert (p["shard"], p["dim"], p["dtype"]) == ("partial", -1, "bfloat16")
            assert (x["shard"], x["dim"], x["dtype"]) == ("replicated", -1, "int64")
    files = sorted(n for n in os.listdir(two_ranks[0]) if n.endswith(".h5"))
    assert {f.split("-")[0] for f in files} == {"rank00000", "rank00001"}
    for seg in d.segments:
        with h5py.File(seg.path, "r") as f:
            assert (f.attrs["rank"], f.attrs["world_size"]) == (seg.rank, 2)
            assert {int(r) for r in f["index"]["rank"]} == {seg.rank}


def test_partial_sum_is_accumulated_in_float64():
    """Known answer with teeth: for these 4 bf16 parts, summing in bf16 gives a different result
    than the float64 sum the reader must return, so a low-precision reassembly would be caught."""
    parts = [partial_part(0, r) for r in range(4)]
    naive = parts[0] + parts[1] + parts[2] + parts[3]
    assert not torch.equal(naive, global_partial(0, 4))


def test_reader_sums_partials_in_float64(tmp_path):
    """The reader itself (not a helper) returns the float64 sum rounded once to bf16."""
    from dumps import write_tp

    path = write_tp(tmp_path / "p", [[[("o", partial_part(0, r), {"shard": "partial"})]] for r in range(4)])
    d = inkling_probe.open(path)
    got = d.tensor("o")
    assert got.dtype == torch.bfloat16 and torch.equal(got, global_partial(0, 4))
    naive = partial_part(0, 0) + partial_part(0, 1) + partial_part(0, 2) + partial_part(0, 3)
    assert not torch.equal(got, naive)
    assert (d.array("o") == global_partial(0, 4).float().numpy()).all()  # the numpy path agrees


def test_four_ranks_reassemble(tmp_path):
    path = str(tmp_path / "d")
    _spawn(4, [(path, {"INKLING_PROBE_WRITER": "inline"})])
    d = _check_global_and_shards(path, 4)
    assert {s.world_size for s in d.segments} == {4} and {s.rank for s in d.segments} == {0, 1, 2, 3}


def test_rank_filter_records_rank_0_only(two_ranks):
    path = two_ranks[1]
    assert {f.split("-")[0] for f in os.listdir(path) if f.endswith(".h5")} == {"rank00000"}
    d = inkling_probe.open(path)
    assert d.ranks == [0] and d.world_size == 2
    assert torch.equal(d.tensor("replicated", 1), replicated(1))
    assert torch.equal(d.tensor("concat", 1, rank=0), global_concat(1, 2)[:, :2])
    assert torch.equal(d.tensor("partial", 1, rank=0), partial_part(1, 0))


@pytest.mark.parametrize("key", ["concat", "partial"])
def test_rank_filtered_shard_is_not_passed_off_as_the_global_tensor(two_ranks, key):
    d = inkling_probe.open(two_ranks[1])
    with pytest.raises(DumpError, match=rf"'{key}' \({key}\) has ranks \[0\] of 2") as e:
        d.tensor(key, 1)
    assert "\n" not in str(e.value)


def test_ls_json_shows_global_shapes(two_ranks):
    from inkling_probe.cli import group

    r = CliRunner().invoke(group, ["ls", two_ranks[0], "--step", "1", "--json"], catch_exceptions=False)
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["world_size"] == 2 and doc["ranks"] == [0, 1] and doc["unfinished_segments"] == []
    shapes = {t["key"]: (t["shape"], t["shard"], t["dim"]) for t in doc["tensors"]}
    assert shapes == {"concat": ([4, 4], "concat", 1), "partial": ([3, 5], "partial", -1),
                      "reduced": ([3, 5], "replicated", -1), "replicated": ([2, 3], "replicated", -1)}
    concat = next(t for t in doc["tensors"] if t["key"] == "concat")
    g = global_concat(1, 2).double()
    assert concat["numel"] == 16 and concat["absmax"] == pytest.approx(g.abs().max().item())
    assert concat["mean"] == pytest.approx(g.mean().item(), rel=1e-6)
    assert concat["rms"] == pytest.approx(g.square().mean().sqrt().item(), rel=1e-6)

    r = CliRunner().invoke(group, ["ls", two_ranks[0], "concat", "--step", "1", "--per-rank", "--json"],
                           catch_exceptions=False)
    per_rank = json.loads(r.output)["tensors"]
    assert [(t["rank"], t["shape"]) for t in per_rank] == [(0, [4, 2]), (1, [4, 2])]

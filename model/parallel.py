"""Process groups for tensor, attention-data and expert parallelism, ``divide()``, and a spawn helper.

Layout for ``world = dp_size * attn_tp``: attention group g holds ranks ``[g*attn_tp, (g+1)*attn_tp)``.
Attention, the dense MLP, shared experts, embedding and head are sharded over the rank's attention
group and run on that group's own requests; the routed experts are sharded over the whole world and
see every group's tokens (gathered over the rank's "dp peers", the ranks with the same
attention-group rank). With ``dp_size == 1`` this is plain tensor parallelism.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist


def divide(n: int, d: int) -> int:
    """n / d, asserting the division is exact."""
    assert n % d == 0, f"{n} is not divisible by {d}"
    return n // d


@dataclass(frozen=True)
class Group:
    """One process group seen from this rank: (rank, size, torch group or None for size 1)."""

    rank: int = 0
    size: int = 1
    group: Any = None

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the group (in place when size > 1); returns x."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Concatenate every rank's equal-shaped ``x`` along ``dim`` in rank order."""
        if self.size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)

    def all_gather_sizes(self, n: int, device=None) -> list[int]:
        """Every rank's integer ``n``, in rank order (a host sync: never inside CUDA-graph capture;
        ``device``: where the collective runs, the model's device, which NCCL needs)."""
        if self.size == 1:
            return [n]
        t = torch.tensor([n], dtype=torch.int64, device=device)
        return [int(v) for v in self.all_gather(t, 0).tolist()]


@dataclass(frozen=True)
class Parallel:
    """The groups a model's layers shard over (see the module docstring)."""

    world: Group = Group()
    attn: Group = Group()      # attention, dense MLP, shared experts, embed, head
    dp_peers: Group = Group()  # one rank per attention group, same attn rank: token gather for MoE
    expert_parallel: bool = False

    @property
    def dp_size(self) -> int:
        return self.dp_peers.size

    @property
    def moe(self) -> Group:
        """The routed experts' group: every rank."""
        return self.world


def init(dp_size: int = 1, expert_parallel: bool = False) -> Parallel:
    """Build the groups from the initialised default process group (or TP=1 without one)."""
    if not (dist.is_available() and dist.is_initialized()):
        if dp_size != 1:
            raise ValueError("attention-DP needs torch.distributed to be initialised")
        return Parallel(expert_parallel=expert_parallel)
    rank, world = dist.get_rank(), dist.get_world_size()
    attn_tp = divide(world, dp_size)
    attn = dp = None
    for g in range(dp_size):  # every rank must create every group, in the same order
        ranks = list(range(g * attn_tp, (g + 1) * attn_tp))
        grp = dist.new_group(ranks) if attn_tp > 1 else None
        if rank in ranks:
            attn = Group(ranks.index(rank), attn_tp, grp)
    for a in range(attn_tp):
        ranks = list(range(a, world, attn_tp))
        grp = dist.new_group(ranks) if dp_size > 1 else None
        if rank in ranks:
            dp = Group(ranks.index(rank), dp_size, grp)
    return Parallel(Group(rank, world, dist.group.WORLD if world > 1 else None), attn, dp, expert_parallel)


def free_port() -> int:
    """A TCP port free on this machine now (bound and released by the OS; never a literal)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world, port, backend, result_dir, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        out = fn(rank, world, *args)
        torch.save(out, os.path.join(result_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(fn: Callable, world_size: int, *args, backend: str = "gloo") -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes with a process group.

    ``fn`` must be importable (module level). Returns every rank's return value in rank order
    (tensors, numbers, lists, dicts: what ``torch.save`` stores and ``weights_only`` loads). A rank
    that raises makes this raise.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="inkling_spawn_") as result_dir:
        mp.spawn(_entry, args=(fn, world_size, free_port(), backend, result_dir, args),
                 nprocs=world_size, join=True)
        return [torch.load(os.path.join(result_dir, f"rank{r}.pt"), weights_only=True)
                for r in range(world_size)]

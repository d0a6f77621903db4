"""The recorder behind an enabled sink: filters, slices and copies each probed tensor to the host,
then hands it to the writer (a separate process by default; see store/writer_process.py)."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections import Counter

import torch

from inkling_probe.errors import SettingsError
from inkling_probe.settings import Settings
from inkling_probe.store import schema
from inkling_probe.store.dtypes import dtype_name, encode
from inkling_probe.store.writer import prepare_dir


def current_rank() -> tuple[int, int]:
    """(rank, world size) from torch.distributed when initialised, else RANK/WORLD_SIZE, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class Recorder:
    """Records probe calls for one process (one rank) according to :class:`Settings`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.step_id = 0
        self._touched = False
        self._seq = 0
        self._calls: Counter = Counter()
        self._writer = None
        self._opened = False
        self._dirty = False  # something was recorded since the last segment ended
        self._wanted: dict[str, bool] = {}  # name -> passes the include/exclude globs
        self.rank, self.world_size = 0, 1

    # -- lifecycle -------------------------------------------------------------------------
    def _open(self):
        self._opened = True
        self.rank, self.world_size = current_rank()
        if not self.settings.rank_records(self.rank):
            return None
        s = self.settings
        prepare_dir(s.path, self.rank, s.overwrite)
        options = dict(segment_mb=s.segment_mb, compress=s.compress, pack_kb=s.pack_kb,
                       run_meta=json.dumps(_run_meta(s), sort_keys=True, default=str))
        if s.writer == "process":
            from inkling_probe.store.writer_process import ProcessWriter
            self._writer = ProcessWriter(s.path, self.rank, self.world_size, **options)
        else:
            from inkling_probe.store.writer import SegmentWriter
            self._writer = SegmentWriter(s.path, self.rank, self.world_size, **options)
        return self._writer

    def next_step(self) -> None:
        """Start the next step (after the current one is on disk); the first call keeps step 0."""
        if self._touched:
            if self._writer is not None and self._dirty:
                self._writer.end_segment(complete_through_step=self.step_id)
                self._dirty = False
            self.step_id += 1
        self._touched = True
        self._seq = 0
        self._calls.clear()

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close(complete_through_step=self.step_id)

    # -- recording -------------------------------------------------------------------------
    def record(self, name: str, tensor, *, shard="replicated", dim=None, token_dim=0, meta=None) -> None:
        self._touched = True
        seq = self._seq
        self._seq += 1
        s = self.settings
        wanted = self._wanted.get(name)
        if wanted is None:
            wanted = self._wanted[name] = s.wants(name)
        if not wanted or self.step_id not in s.steps:
            return
        writer = self._writer if self._opened else self._open()
        if writer is None:
            return
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"probe {name!r}: expected a torch.Tensor, got {type(tensor).__name__}")
        _check_layout(name, tensor, shard, dim)
        call = self._calls[name]
        self._calls[name] += 1
        token_dim = _token_dim(tensor, token_dim)
        t, token_start = _slice_tokens(tensor.detach(), s.tokens, token_dim)
        if t.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"probe {name!r}: eager probes cannot run inside CUDA-graph capture")
        t = t.contiguous().cpu()
        array, storage = encode(t)
        row = {
            "key": name, "step": self.step_id, "seq": seq, "call": call, "rank": self.rank,
            "shape": schema.shape_text(t.shape), "dtype": dtype_name(t.dtype), "storage": storage,
            "shard": shard, "dim": dim % tensor.dim() if shard == "concat" else schema.NO_DIM,
            "token_dim": schema.NO_DIM if token_dim is None else token_dim, "token_start": token_start,
            "numel": t.numel(),
            "meta": json.dumps(meta, sort_keys=True, default=str) if meta else "",
        }
        writer.add(row, array, stats=s.mode != "hash", store=s.mode == "full")
        self._dirty = True


def _check_layout(name: str, tensor: torch.Tensor, shard: str, dim) -> None:
    if shard not in schema.SHARDS:
        raise SettingsError(f"probe {name!r}: shard={shard!r}, expected one of {'|'.join(schema.SHARDS)}")
    if shard == "concat" and (dim is None or not -tensor.dim() <= dim < tensor.dim()):
        raise SettingsError(f"probe {name!r}: shard='concat' needs dim within the tensor's {tensor.dim()} dims")
    if "/" in name or not name:
        raise SettingsError(f"probe name {name!r}: must be non-empty and contain no '/'")


def _token_dim(t: torch.Tensor, token_dim: int | None) -> int | None:
    """The tensor's token dim, normalised (negative dims count from the end); None if it has none."""
    if token_dim is None or not -t.dim() <= token_dim < t.dim():
        return None
    return token_dim % t.dim()


def _slice_tokens(t: torch.Tensor, tokens: slice | None, token_dim: int | None):
    if tokens is None or token_dim is None:
        return t, 0
    start, _, _ = tokens.indices(t.shape[token_dim])
    return t[(slice(None),) * token_dim + (tokens,)], start


def _run_meta(s: Settings) -> dict:
    return {
        "argv": sys.argv, "pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
        "torch": torch.__version__, "python": sys.version.split()[0],
        "settings": {k: repr(v) for k, v in s.__dict__.items()},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("INKLING_", "NCCL_", "CUDA_"))},
    }

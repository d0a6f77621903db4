"""A foreign dump presented as a :class:`~inkling_probe.store.dump.Dump`: the same index rows,
keys, steps, ranks and reassembly, tensors read from the foreign files on demand.

Listing reads file headers only (safetensors and .npy headers, .pt files mapped), never tensor
data, so index statistics are unknown (NaN, NaN/Inf counts -1) and hashes empty; ``inkling-probe
import`` computes them as it writes our store.
"""
from __future__ import annotations

import math
import os
from collections import OrderedDict, defaultdict

import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.keys import key_problem
from inkling_probe.store import gaps, schema
from inkling_probe.store.foreign import layout as lay
from inkling_probe.store.foreign.loaders import describe, load
from inkling_probe.store.foreign.names import Source, list_sources
from inkling_probe.store.dump import Dump
from inkling_probe.store.segments import Segment

UNDECLARED = "undeclared"  # a multi-rank key whose layout no map rule declares
_UNKNOWN_STATS = {"mean": math.nan, "rms": math.nan, "absmax": math.nan, "nan": -1, "inf": -1}


class ForeignDump(Dump):
    """A folder (or file) of foreign tensors read as one dump; see docs/INTEROP.md."""

    def __init__(self, path, name_map=None, pattern: str | None = None, params: dict | None = None,
                 token_dim=None):
        self.path = os.fspath(path)
        self.unfinished: list[str] = []
        self.missing_segments: list[str] = []
        self.layout = lay.Layout(name_map, params, token_dim)
        sources = list_sources(self.path, pattern)
        _one_run(self.path, sources)
        self.kind = _kind(sources)
        rows = self._index(sources)
        _auto_token_dims(rows)
        if not rows:
            raise DumpError(f"{self.path}: no tensors left after the name map")
        self.ranks = sorted({r["rank"] for r in rows})
        self.world_size = _world(self.path, rows, self.ranks)
        self.dp_size = 1
        self.run_id = ""
        run = {"foreign": self.kind, "name_map": getattr(name_map, "source", None), "pattern": pattern}
        self.segments = [Segment(self.path, r, self.world_size, -1, run) for r in self.ranks]
        for r in rows:
            if r["shard"] == UNDECLARED and self.world_size == 1:
                r["shard"], r["dim"] = "replicated", schema.NO_DIM
        rows.sort(key=lambda r: (r["step"], r["seq"], r["rank"]))
        self._set_rows(rows)  # Dump's indexes (store/dump.py)
        self._files: OrderedDict = OrderedDict()
        self._packs: OrderedDict = OrderedDict()
        self._pack_bytes = 0

    def complete_through_step(self, rank: int = 0) -> int:
        return max((r["step"] for r in self._rows if r["rank"] == rank), default=-1)

    # -- index -----------------------------------------------------------------------------
    def _index(self, sources: list[Source]) -> list[dict]:
        rows, seqs, calls = [], {}, defaultdict(int)
        for src in sorted(sources, key=lambda s: (s.step, _order(s), s.rank)):
            for item in describe(src.path, src.fmt):
                raw = src.key if not item.name else (f"{src.key}.{item.name}" if src.key else item.name)
                ident = (raw, src.step, src.rank)  # the n-th time this name was dumped in the step
                call = src.call if src.call is not None else calls[ident]
                calls[ident] += 1
                for view in self.layout.views(raw):
                    seq = seqs.setdefault((view.key, src.step, call), len(seqs))
                    rows.append(self._row(src, item, raw, view, call, seq))
        self._check_duplicates(rows)
        return rows

    def _row(self, src: Source, item, raw: str, view: lay.View, call: int, seq: int) -> dict:
        shape = lay.split_shape(item.shape, view.part)
        dim = schema.NO_DIM if view.dim is None else (view.dim % len(shape) if shape else 0)
        auto = view.token_dim == lay.AUTO
        td = None if auto or view.token_dim is None or view.token_dim >= max(len(shape), 1) else view.token_dim
        meta = {k: v for k, v in item.meta.items() if isinstance(v, (int, float, str, bool))}
        meta = {"source": os.path.relpath(src.path, self.path) if os.path.isdir(self.path) else
                os.path.basename(src.path), "source_key": raw, **({"dumper": meta} if meta else {})}
        if view.decision:
            meta["kind"] = "decision"
        return {"key": view.key, "step": src.step, "seq": seq, "call": call, "rank": src.rank,
                "shape": shape, "shape_text": schema.shape_text(shape), "dtype": item.dtype,
                "storage": "native", "shard": view.shard or UNDECLARED, "dim": dim,
                "token_dim": schema.NO_DIM if td is None else td, "token_start": 0, "numel": math.prod(shape),
                **_UNKNOWN_STATS, "hash": "", "dataset": "", "offset": -1, "meta": meta,
                "_src": (src.path, src.fmt, item.name), "_part": view.part, "_auto_td": auto}

    def _check_duplicates(self, rows: list[dict]) -> None:
        seen: dict[tuple, str] = {}
        for r in rows:
            problem = key_problem(r["key"])
            if problem:  # the key rule recording follows (inkling_probe/keys.py)
                raise DumpError(f"{self.path}: {r['meta']['source_key']!r} reads as key {r['key']!r}: {problem}")
            ident = (r["key"], r["step"], r["call"], r["rank"])
            if ident in seen and seen[ident] != r["meta"]["source_key"]:
                raise DumpError(f"{self.path}: {seen[ident]!r} and {r['meta']['source_key']!r} both read as key "
                                f"{r['key']!r} (step {r['step']}, rank {r['rank']}); fix the name map")
            seen[ident] = r["meta"]["source_key"]

    # -- tensors ---------------------------------------------------------------------------
    def _load_array(self, row: dict) -> np.ndarray:
        path, fmt, name = row["_src"]
        array = load(path, fmt, name)
        if row["_part"] is not None:
            array = np.ascontiguousarray(lay.cut(array, row["_part"], row["key"], path))
        if tuple(array.shape) != tuple(row["shape"]):
            raise DumpError(f"{path}: {name or 'its tensor'!r} has shape {list(array.shape)} now, "
                            f"{list(row['shape'])} when listed (file changed?)")
        return array

    def _combine(self, key: str, rows: list[dict]) -> np.ndarray:
        if rows[0]["shard"] == UNDECLARED and len(rows) > 1:
            raise DumpError(f"{self.path}: key {key!r} was recorded by ranks {[r['rank'] for r in rows]} and "
                            "no name map rule declares how its shards combine (shard = concat/partial/"
                            "replicated); add one, or read one rank (rank=)")
        return super()._combine(key, rows)

    def close(self) -> None:
        from inkling_probe.store.foreign.loaders import forget
        forget()

    def __repr__(self):
        return (f"ForeignDump({self.path!r}, {self.kind}: {len(self._by_key)} keys, {len(self._rows)} tensors, "
                f"ranks {self.ranks} of {self.world_size})")


def _auto_token_dims(rows: list[dict]) -> None:
    """Token dims of rows without a declared one, as our hooks find them (hooks.py ``layout``): from
    the root module's ``[B, T]`` integer input when the dump holds it (``in.input_ids``, ``in.0``, or
    ``input_ids`` as SGLang's dumper names that core field); else they stay unknown."""
    root = next((r for r in rows if r["key"] in ("in.input_ids", "in.0", "input_ids") and len(r["shape"]) == 2
                 and r["dtype"].startswith(("int", "uint"))), None)
    if root is None:
        return
    b, n = root["shape"]
    for r in rows:
        if not r["_auto_td"] or not r["shape"]:
            continue
        s = r["shape"]
        if len(s) >= 2 and s[0] == b and s[1] == n:
            r["token_dim"], r["meta"]["batch_dim"] = 1, 0
        elif len(s) >= 3 and s[0] == b and s[2] == n:
            r["token_dim"], r["meta"]["batch_dim"] = 2, 0
        elif s[0] == b * n:
            r["token_dim"] = 0
            if b > 1:
                r["meta"]["batch"] = b


def _order(src: Source) -> tuple:
    """Execution order inside a step: the dumper's index, else the file's modification time."""
    if src.order and isinstance(src.order[0], int) and src.order[0] > 0:
        return src.order
    try:
        return (os.stat(src.path).st_mtime_ns,) + tuple(src.order)
    except OSError:
        return (0,) + tuple(src.order)


def _kind(sources: list[Source]) -> str:
    """'sglang dumper (pt)', 'files (safetensors, npz)', ...: how the dump was named and stored."""
    schemes = sorted({s.scheme for s in sources})
    fmts = sorted({s.fmt for s in sources})
    return f"{'+'.join(schemes)} ({', '.join(fmts)})"


def _one_run(path: str, sources: list[Source]) -> None:
    runs = sorted({s.run for s in sources})
    if len(runs) > 1:
        shown = "; ".join(f"{r or '(top folder)'}: ranks {sorted({s.rank for s in sources if s.run == r})}"
                          for r in runs[:4])
        raise DumpError(f"{path}: mixes {len(runs)} runs ({shown}); point at one run's folder")


def _world(path: str, rows: list[dict], ranks: list[int]) -> int:
    """The world size: the dumper's declared one, else the ranks present; every rank below it must
    be present (the gaps are found between the ranks present, never by listing the world)."""
    declared = {int(r["meta"]["dumper"]["world_size"]) for r in rows
                if isinstance(r["meta"].get("dumper", {}).get("world_size"), int)}
    if len(declared) > 1:
        raise DumpError(f"{path}: its files declare world sizes {sorted(declared)[:4]}; one run has one")
    if declared and ranks[-1] >= min(declared):
        raise DumpError(f"{path}: rank {ranks[-1]} is outside the world size {min(declared)} its files declare")
    world = max(declared | {ranks[-1] + 1})
    holes = gaps.missing(ranks, world)
    if holes:
        n = gaps.count(holes)
        shown = gaps.text([(r, r) for r in ranks], shown=4)
        raise DumpError(f"{path}: a world of {world} with {'rank' if len(ranks) == 1 else 'ranks'} {shown} present: "
                        f"{'rank' if n == 1 else 'ranks'} {gaps.text(holes)} {'is' if n == 1 else 'are'} missing "
                        f"({n} missing); a dump needs every rank's files")
    return world

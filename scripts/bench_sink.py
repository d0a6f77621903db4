"""Benchmarks of the probe core, each measured side by side in one run (docs/PERFORMANCE.md).

1. disabled cost: a small model's forward with probe calls present but recording off, vs the same
   forward with the calls removed (target <= 1.01);
2. recording throughput and bytes on disk, full mode, vs torch.save of one file per tensor (what
   SGLang's dumper does) (target: at least as fast, no larger);
3. compression: stock gzip vs none on fp32 and bf16 activations.

record() on transformers' Inkling against torch.save from hooks: scripts/bench_record.py.

Run: .venv/bin/python scripts/bench_sink.py [--only disabled,throughput,compress] [--repeats N]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
import timeit

import torch

import inkling_probe
from inkling_probe import settings, sink
from inkling_probe.recorder.recorder import Recorder


def interleaved(fns: dict, repeats: int) -> dict:
    """Median seconds of each callable, run in turn (shuffled order) ``repeats`` times, after a warm-up."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    order = list(fns)
    rng = random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for k in order:
            f = fns[k]
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


# -- 1. disabled cost ----------------------------------------------------------------------------
class ProbedMLP(torch.nn.Module):
    """8 residual blocks, 3 probe calls each, and an identical forward without them."""

    def __init__(self, width=256, depth=8):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.names = [(f"layers.{i}.in", f"layers.{i}.mlp", f"layers.{i}.resid") for i in range(depth)]

    def forward(self, x):  # probe names are built once, as inkling_model's layers do
        for block, (n_in, n_mlp, n_resid) in zip(self.blocks, self.names):
            inkling_probe.probe(n_in, x)
            y = torch.relu(block(x))
            inkling_probe.probe(n_mlp, y, shard="concat", dim=1)
            x = x + y
            inkling_probe.probe(n_resid, x)
        return x

    def forward_without_probes(self, x):  # the same code with the three probe lines deleted
        for block, (n_in, n_mlp, n_resid) in zip(self.blocks, self.names):
            y = torch.relu(block(x))
            x = x + y
        return x


def _empty_function(name, tensor, *, shard="replicated", dim=None, token_dim=0, **meta):
    return None


def bench_disabled(repeats: int) -> None:
    assert not inkling_probe.enabled()
    model, x = ProbedMLP().eval(), torch.randn(64, 256)
    real = inkling_probe.probe

    def with_bare_function(x):  # the floor: the same calls to an empty Python function
        inkling_probe.probe = _empty_function
        try:
            return model(x)
        finally:
            inkling_probe.probe = real

    with torch.no_grad():
        t = interleaved({"removed": lambda: model.forward_without_probes(x),
                         "removed (again)": lambda: model.forward_without_probes(x),
                         "empty function": lambda: with_bare_function(x),
                         "disabled": lambda: model(x)}, repeats)
    call = timeit.timeit(lambda: inkling_probe.probe("layers.0.mlp", x, shard="concat", dim=1), number=100_000)
    print(f"disabled probes: {t['disabled'] * 1e6:.0f} us vs calls removed {t['removed'] * 1e6:.0f} us "
          f"per forward (24 probe calls): ratio {t['disabled'] / t['removed']:.4f}  (target <= 1.01); "
          f"A/A noise {t['removed (again)'] / t['removed']:.4f}; the same calls to an empty Python function "
          f"{t['empty function'] / t['removed']:.4f}; one disabled call {call * 1e4:.0f} ns")


# -- 2. throughput vs torch.save -----------------------------------------------------------------
def _tensors(total_mb: int):
    g = torch.Generator().manual_seed(0)
    sizes = [1 << 17, 1 << 14, 1 << 10]  # 512 KiB, 64 KiB, 4 KiB of float32: large and small tensors
    out, total = [], 0
    while total < total_mb << 20:
        n = sizes[len(out) % 3]
        out.append(torch.randn(n, generator=g))
        total += 4 * n
    return out


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def bench_throughput(total_mb: int, repeats: int) -> None:
    """Steady state: one recording per writer, each step writes the whole tensor set (step() waits
    until it is on disk), vs torch.save of the same set into a new folder. Cold: a new recording per
    run, so the writer's start-up is counted too."""
    tensors = _tensors(total_mb)
    nbytes = sum(t.numel() * 4 for t in tensors)
    root = tempfile.mkdtemp(prefix="bench-sink-")
    runs = {"n": 0}

    def write_step():
        inkling_probe.step()
        for i, t in enumerate(tensors):
            inkling_probe.probe(f"t.{i}", t)
        inkling_probe.step()  # returns when this step's segment is on disk

    def cold(writer):
        runs["n"] += 1
        with inkling_probe.recording(os.path.join(root, f"cold-{writer}-{runs['n']}"), writer=writer):
            for i, t in enumerate(tensors):
                inkling_probe.probe(f"t.{i}", t)

    def torch_save():
        runs["n"] += 1
        out = os.path.join(root, f"pt-{runs['n']}")
        os.makedirs(out)
        for i, t in enumerate(tensors):
            torch.save(t, os.path.join(out, f"t.{i}.pt"))

    fns = {"torch.save": torch_save, "cold process": lambda: cold("process"),
           "cold inline": lambda: cold("inline")}
    # one recorder per writer stays open across the interleaved runs; each call makes it active
    opened = {w: Recorder(settings.make(os.path.join(root, f"steady-{w}"), writer=w))
              for w in ("process", "inline")}

    def steady(writer):
        sink._RECORDER = opened[writer]
        try:
            write_step()
        finally:
            sink._RECORDER = None

    fns.update({"steady process": lambda: steady("process"), "steady inline": lambda: steady("inline")})
    t = interleaved(fns, repeats)
    for rec in opened.values():
        rec.close()
    h5 = _du(next(os.path.join(root, n) for n in os.listdir(root) if n.startswith("cold-")))
    pt = _du(next(os.path.join(root, n) for n in os.listdir(root) if n.startswith("pt-")))
    shutil.rmtree(root)
    mbs = {k: nbytes / v / 1e6 for k, v in t.items()}
    print(f"full-mode recording of {len(tensors)} tensors, {nbytes / 1e6:.0f} MB (page cache, no fsync), "
          f"vs torch.save per file {mbs['torch.save']:.0f} MB/s:")
    for kind in ("steady process", "steady inline", "cold process", "cold inline"):
        print(f"  {kind:15s}: {mbs[kind]:.0f} MB/s, ratio {mbs[kind] / mbs['torch.save']:.2f}x  (target >= 1)")
    print(f"  bytes on disk: inkling-probe {h5 / 1e6:.1f} MB, torch.save {pt / 1e6:.1f} MB: ratio "
          f"{h5 / pt:.3f}  (target <= 1)")


def bench_compress(repeats: int) -> None:
    """Does stock gzip pay? fp32 activations vs bf16 activations (stored as exact float32)."""
    g = torch.Generator().manual_seed(0)
    sets = {"float32": [torch.randn(1 << 18, generator=g) for _ in range(64)]}
    sets["bfloat16"] = [t.bfloat16() for t in sets["float32"]]
    root = tempfile.mkdtemp(prefix="bench-compress-")
    runs = {"n": 0}

    def rec(name, compress):
        runs["n"] += 1
        path = os.path.join(root, f"{name}-{compress}-{runs['n']}")
        with inkling_probe.recording(path, compress=compress, writer="inline"):
            for i, t in enumerate(sets[name]):
                inkling_probe.probe(f"t.{i}", t)
        return path

    for name, tensors in sets.items():
        mb = sum(t.numel() * t.element_size() for t in tensors) / 1e6
        t = interleaved({c: (lambda c=c: rec(name, c)) for c in ("none", "gzip")}, repeats)
        sizes = {c: _du(rec(name, c)) / 1e6 for c in ("none", "gzip")}
        print(f"compression, {name} activations ({mb:.0f} MB in memory): none {mb / t['none']:.0f} MB/s "
              f"{sizes['none']:.0f} MB on disk | gzip-1+shuffle {mb / t['gzip']:.0f} MB/s "
              f"{sizes['gzip']:.0f} MB on disk ({sizes['none'] / sizes['gzip']:.2f}x smaller, "
              f"{t['gzip'] / t['none']:.1f}x slower)")
    shutil.rmtree(root)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="disabled,throughput,compress")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--total-mb", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)  # as in MEASURED.md's peer table
    which = set(args.only.split(","))
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, torch threads 1")
    if "disabled" in which:
        bench_disabled(max(args.repeats, 1001))
    if "throughput" in which:
        bench_throughput(args.total_mb, max(3, args.repeats // 3))
    if "compress" in which:
        bench_compress(max(3, args.repeats // 3))


if __name__ == "__main__":
    main()

"""Benchmark compare: throughput (MB/s) and peak RSS on dumps of >= 2 GB, against the largest tensor.

Writes dump pairs into a temp dir with the real recorder (inkling_probe.recording + probe), then, in a
fresh process per pair, reads both dumps once (the I/O part alone), runs `compare`, and reads that
process's peak RSS (VmHWM) and its RSS after imports. Configurations, measured side by side:
  A: 2 GiB dump of 8 MiB fp32 tensors          (the headline: throughput and peak RSS)
  B: 1 GiB dump of the same tensors            (half the dump: peak RSS should not move)
  C: 2 GiB dump whose largest tensor is 128 MiB (peak RSS should follow the largest tensor)
  D: A's pair, bf16                             (decode + upcast cost)
The candidate is the reference plus 1e-3 relative noise, so every tensor is read and measured
(bit-identical pairs would be settled by the index hashes without reading data).

    python scripts/bench_compare.py [--gib 2] [--keep DIR]
    python scripts/bench_compare.py --startup          # compare's start-up vs import h5py, numpy
    python scripts/bench_compare.py --explain-bound    # explain on vs off on a 128 MiB culprit
    python scripts/bench_compare.py --scale [--gib 10] [--dtype bfloat16]
                                    # issue 26: compare --jobs 1 / all cores vs h5py alone on a pair of
                                    # --gib GB on disk
    python scripts/bench_compare.py --cluster [--gib 10] [--rounds 3] [--tensor-mib 8]
                                    # issue 44: compare --jobs 1 / <cores> vs a local Dask cluster of 2 and 4
                                    # worker processes (compare --cluster) on the same pair of --gib GB;
                                    # exits 1 unless every report is byte-identical
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


def _write_pair(root: str, name: str, sizes_mib: list[int], dtype: str) -> tuple[str, str]:
    import torch

    import inkling_probe

    dt = getattr(torch, dtype)
    paths = (os.path.join(root, f"{name}-ref"), os.path.join(root, f"{name}-cand"))
    gen = torch.Generator().manual_seed(0)
    tensors = []
    for i, mib in enumerate(sizes_mib):
        n = mib * MIB // torch.empty(0, dtype=dt).element_size()
        tensors.append(torch.randn(n // 1024, 1024, generator=gen).to(dt))
    for which, path in zip(("ref", "cand"), paths):
        with inkling_probe.recording(path):
            inkling_probe.step()
            for i, t in enumerate(tensors):
                x = t if which == "ref" else t + (1e-3 * torch.randn(t.shape, generator=gen)).to(dt)
                inkling_probe.probe(f"layers.{i // 8}.t{i % 8}", x)
    return paths


_CHILD = r"""
import json, resource, sys, time
import h5py, rich, inkling_probe
from inkling_probe.compare import compare
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
base = rss("VmRSS:")
t0 = time.perf_counter()
for path in sys.argv[1:3]:  # read-only pass: the I/O and decode part alone (also warms the page cache)
    d = inkling_probe.open(path)
    for k in d.keys():
        d.array(k)
    d.close()
read = time.perf_counter() - t0
t0 = time.perf_counter()
rep = compare(sys.argv[1], sys.argv[2], explain=sys.argv[3:4] == ["explain"])
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "read_seconds": read, "rows": len(rep.rows), "diverged": rep.diverged,
                  "base_rss": base, "peak_rss": rss("VmHWM:"), "torch": "torch" in sys.modules,
                  "culprit": rep.culprit.key if rep.culprit else None,
                  "findings": [f["hypothesis"] for f in (rep.culprit.findings if rep.culprit else [])],
                  "max_error": max(r.error or 0 for r in rep.rows)}))
"""


def _measure(ref: str, cand: str, explain: bool = False) -> dict:
    args = [sys.executable, "-c", _CHILD, ref, cand] + (["explain"] if explain else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _culprit_pair(root: str) -> tuple[str, str]:
    """A 128 MiB fp32 culprit (x 1.05) between small exact tensors: what explain has to work on."""
    import torch

    import inkling_probe

    gen = torch.Generator().manual_seed(0)
    big = torch.randn(32768, 1024, generator=gen)  # [32768, 1024] fp32 = 128 MiB
    small = [torch.randn(64, 64, generator=gen) for _ in range(4)]
    paths = (os.path.join(root, "X-ref"), os.path.join(root, "X-cand"))
    for which, path in zip(("ref", "cand"), paths):
        with inkling_probe.recording(path):
            inkling_probe.step()
            inkling_probe.probe("layers.0.a", small[0])
            inkling_probe.probe("layers.1.mlp.out", big if which == "ref" else big * 1.05)
            for i, t in enumerate(small[1:]):
                inkling_probe.probe(f"layers.{i + 2}.b", t)
    return paths


def explain_bound(root: str, repeats: int = 3) -> None:
    """compare with explain on vs off on a 128 MiB culprit: time ratio and peak memory / the tensor."""
    ref, cand = _culprit_pair(root)
    largest = 128 * MIB
    rows = []
    for _ in range(repeats):  # interleaved, fresh processes
        rows.append((_measure(ref, cand, False), _measure(ref, cand, True)))
    off = sorted(r[0]["seconds"] for r in rows)[repeats // 2]
    on = sorted(r[1]["seconds"] for r in rows)[repeats // 2]
    grow_off = max(r[0]["peak_rss"] - r[0]["base_rss"] for r in rows)
    grow_on = max(r[1]["peak_rss"] - r[1]["base_rss"] for r in rows)
    last = rows[-1][1]
    print(f"explain bound, 128 MiB fp32 culprit (x1.05), median of {repeats} interleaved fresh processes:")
    print(f"  compare, explain off: {off:.2f} s, peak RSS - base {grow_off / MIB:.0f} MiB ({grow_off / largest:.2f}x the tensor)")
    print(f"  compare, explain on : {on:.2f} s, peak RSS - base {grow_on / MIB:.0f} MiB ({grow_on / largest:.2f}x the tensor)")
    print(f"  time ratio on/off {on / off:.2f} (target <= 2); memory {grow_on / largest:.2f}x the largest tensor "
          f"(target <= 3); culprit {last['culprit']} findings {last['findings']}; torch imported: {last['torch']}")


def startup(root: str, repeats: int = 7) -> None:
    """Wall time of `inkling-probe compare` on two small dumps vs `python -c "import h5py, numpy"`."""
    import torch

    import inkling_probe

    gen = torch.Generator().manual_seed(0)
    ts = [torch.randn(16, 128, generator=gen) for _ in range(107)]
    paths = []
    for which in ("ref", "cand"):
        path = os.path.join(root, f"S-{which}")
        with inkling_probe.recording(path):
            inkling_probe.step()
            for i, t in enumerate(ts):
                inkling_probe.probe(f"layers.{i // 16}.t{i % 16}", t if which == "ref" or i != 50 else t * 1.05)
        paths.append(path)
    cmds = {"python -c 'import h5py, numpy'": [sys.executable, "-c", "import h5py, numpy"],
            "inkling-probe compare (107 keys, 1 culprit)": [sys.executable, "-m", "inkling_probe.cli", "compare", *paths],
            "python -c 'import torch'": [sys.executable, "-c", "import torch"]}
    times = {k: [] for k in cmds}
    for _ in range(repeats):  # interleaved
        for k, c in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(c, capture_output=True, env={**os.environ, "COLUMNS": "120"})
            times[k].append(time.perf_counter() - t0)
    base = sorted(times["python -c 'import h5py, numpy'"])[repeats // 2]
    print(f"start-up, wall, median of {repeats} interleaved runs:")
    for k, v in times.items():
        med = sorted(v)[repeats // 2]
        print(f"  {k:45} {med:5.2f} s  ({med - base:+.2f} s vs import h5py, numpy)")


_SCALE_CHILD = r"""
import hashlib, json, os, resource, sys, time
mode, ref, cand = sys.argv[1:4]
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
import h5py, numpy, inkling_probe.compare.measure
base = rss("VmRSS:")
t0, c0 = time.perf_counter(), time.process_time()
if mode == "h5py":  # the same datasets' bytes, read whole with h5py alone
    import h5py, numpy as np
    n = 0
    for d in (ref, cand):
        for f in sorted(os.listdir(d)):
            if not f.endswith(".h5"):
                continue
            with h5py.File(os.path.join(d, f), "r") as h:
                def visit(name, obj):
                    global n
                    if isinstance(obj, h5py.Dataset) and obj.size > 1 << 16:
                        a = np.empty(obj.shape, obj.dtype)
                        obj.read_direct(a)
                        n += a.nbytes
                h.visititems(visit)
    out = {"bytes": n}
else:
    from inkling_probe.compare import compare, engine, parallel
    marks = []
    def timed_mark(*a, _real=engine.relations.mark, **k):  # relations explains diverged rows left open
        w, c = time.perf_counter(), time.process_time()
        try:
            return _real(*a, **k)
        finally:
            marks.append((time.perf_counter() - w, time.process_time() - c))
    engine.relations.mark = timed_mark
    if mode.startswith("tcp://"):
        rep = compare(ref, cand, explain=False, cluster=mode)
    else:
        rep = compare(ref, cand, explain=False, jobs=int(mode))
    out = {"workers": [] if mode.startswith("tcp://") else list(parallel.LAST_WORKERS.values()), "relations": marks[0] if marks else (0, 0), "rows": len(rep.rows), "diverged": rep.diverged, "doc": hashlib.sha256(json.dumps(rep.to_dict(), sort_keys=True, default=str).encode()).hexdigest()}
out.update(seconds=time.perf_counter() - t0, peak_rss=rss("VmHWM:"), base_rss=base, cpu_s=time.process_time() - c0
           + sum(w["cpu_s"] for w in out.get("workers", [])))
print(json.dumps(out))
"""


def _write_scale_pair(root: str, gb: float, tensor_mib: int = 64, dtype: str = "float32") -> tuple[str, str]:
    """A reference and candidate (1e-3 relative noise) of ``gb``/2 GB each, tensors of ``tensor_mib``
    stored as ``dtype``."""
    import torch

    import inkling_probe

    dt = getattr(torch, dtype)
    size = torch.empty(0, dtype=dt).element_size()
    n = max(1, int(gb * 1e9 / 2 / (tensor_mib * MIB)))
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(tensor_mib * MIB // size // 1024, 1024, generator=gen) for _ in range(4)]
    noise = [1e-3 * torch.randn(b.shape, generator=gen) for b in base[:3]]
    paths = (os.path.join(root, "L-ref"), os.path.join(root, "L-cand"))
    for which, path in zip(("ref", "cand"), paths):
        with inkling_probe.recording(path):
            inkling_probe.step()
            for i in range(n):
                t = base[i % 4] * (1 + i / n)
                if which == "cand":
                    t = t + noise[i % 3] * t.abs().mean()
                inkling_probe.probe(f"layers.{i // 8}.t{i % 8}", t.to(dt))
    return paths


def _scale_run(mode: str, ref: str, cand: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _SCALE_CHILD, mode, ref, cand], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


_KERNEL_RSS_CHILD = r"""
import json
import inkling_probe.compare.measure
from inkling_probe.compare import fused
def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
before = rss()
k = fused.kernel()  # loads (or compiles) and runs it once on each dtype
print(json.dumps({"kernel": k is not None, "rss": rss() - before}))
"""


def _kernel_rss() -> dict:
    """What loading the compiled pass (numba, LLVM and the cached kernel) adds to a process's RSS."""
    out = subprocess.run([sys.executable, "-c", _KERNEL_RSS_CHILD], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _scale_pair(root: str, gb: float, tensor_mib: int, dtype: str) -> tuple[str, str]:
    """The --scale pair in ``root``, written unless a pair of these settings is already there."""
    ref, cand = (os.path.join(root, "L-ref"), os.path.join(root, "L-cand"))
    marker = os.path.join(root, f"L-{gb}-{tensor_mib}-{dtype}.done")
    if not os.path.exists(marker):  # --keep DIR: a pair written there before is reused
        for p in (ref, cand):
            shutil.rmtree(p, ignore_errors=True)
        for old in os.listdir(root):  # another size or dtype written here before
            if old.startswith("L-") and old.endswith(".done"):
                os.remove(os.path.join(root, old))
        ref, cand = _write_scale_pair(root, gb, tensor_mib, dtype)
        open(marker, "w").close()
    return ref, cand


def _worker_usage(client, warm: bool = False) -> dict:
    """Each of the cluster's worker processes: its CPU seconds and peak RSS (bytes) so far; ``warm``:
    after importing what a measurement needs and loading the compiled pass, as a cluster that has
    measured before has (a --jobs worker imports at start-up too, parallel._init_worker)."""
    def usage(warm=warm):
        import resource

        if warm:
            from inkling_probe.compare import fused, measure  # noqa: F401
            from inkling_probe.store import dump  # noqa: F401

            fused.kernel()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024

    return client.run(usage)


def _own_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def on_cluster(root: str, gb: float, rounds: int = 1, tensor_mib: int = 8, dtype: str = "float32") -> bool:
    """compare --jobs 1 and --jobs <cores> against --cluster on local Dask clusters of 2 and 4 worker
    processes (one thread each), on the same pair, interleaved; the reports' hashes compared. True when
    every report is byte-identical."""
    import logging

    import distributed

    from inkling_probe.compare.parallel import default_jobs

    t0 = time.perf_counter()
    ref, cand = _scale_pair(root, gb, tensor_mib, dtype)
    total = _dump_bytes(ref) + _dump_bytes(cand)
    keys = len([r for r in _index(ref) if r.get("numel")])
    cores = default_jobs()
    clusters = {n: distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                            worker_dashboard_address=None, silence_logs=logging.CRITICAL)
                for n in (2, 4)}
    clients = {n: distributed.Client(c, set_as_default=False) for n, c in clusters.items()}
    bases = {n: _worker_usage(c, warm=True) for n, c in clients.items()}  # peak RSS after imports, per worker
    modes = {"--jobs 1": "1"} | ({f"--jobs {cores}": str(cores)} if cores > 1 else {}) | {
        f"--cluster, {n} workers": c.scheduler_address for n, c in clusters.items()}
    print(f"pair: {total / 1e9:.2f} GB on disk, {keys} keys a dump ({tensor_mib} MiB {dtype} tensors, 1e-3 noise), "
          f"ready in {time.perf_counter() - t0:.0f} s; {cores} cores; {rounds} round(s), interleaved; local clusters: "
          "worker processes of one thread each on this machine, the scheduler in this process")
    runs = {m: [] for m in modes}
    try:
        for i in range(rounds):
            for m, arg in modes.items():
                n = next((n for n, c in clusters.items() if c.scheduler_address == arg), None)
                before, own = (_worker_usage(clients[n]), _own_cpu()) if n else ({}, 0.0)
                r = _scale_run(arg, ref, cand)
                if n:  # the workers' and the scheduler's CPU; the workers' peak RSS over their base
                    after = _worker_usage(clients[n])
                    r["cpu_s"] += sum(after[w][0] - before[w][0] for w in after) + _own_cpu() - own
                    r["worker_peak"] = max(after[w][1] - bases[n].get(w, after[w])[1] for w in after)
                else:
                    r["worker_peak"] = max((w["peak_rss"] - w["base_rss"] for w in r["workers"]), default=0)
                runs[m].append(r)
            print(f"  round {i + 1}: " + "; ".join(f"{m} {runs[m][-1]['seconds']:.1f} s" for m in modes), flush=True)
    finally:
        for c in list(clients.values()) + list(clusters.values()):
            c.close()
    base1 = _median(runs["--jobs 1"])["seconds"]
    basen = _median(runs[f"--jobs {cores}"])["seconds"]
    for m in modes:
        med = _median(runs[m])
        print(f"  compare {m:<22} {med['seconds']:6.1f} s {total / 1e9 / med['seconds']:5.2f} GB/s | "
              f"{base1 / med['seconds']:.2f}x of --jobs 1, {basen / med['seconds']:.2f}x of --jobs {cores} | "
              f"{med['cpu_s']:5.1f} CPU s | worker peak RSS {med['worker_peak'] / MIB:4.0f} MiB over its base | rounds "
              + " / ".join(f"{r['seconds']:.1f}" for r in runs[m]))
    docs = {r["doc"] for rs in runs.values() for r in rs}
    print(f"  reports byte-identical across --jobs and --cluster, all rounds: {len(docs) == 1} "
          f"(sha256 of compare --json's document: {len(docs)} distinct)")
    print("  medians over rounds; CPU s: the compare process, its --jobs workers, or the cluster's workers and "
          "scheduler; worker peak RSS: the largest worker's, over its peak after imports (the clusters' workers "
          f"imported and loaded the compiled pass before round 1); {cores} cores shared with other jobs: a cluster "
          "on them cannot be faster than --jobs")
    return len(docs) == 1


def _index(path: str) -> list:
    import inkling_probe

    d = inkling_probe.open(path)
    try:
        return list(d.index)
    finally:
        d.close()


def scale(root: str, gb: float, rounds: int = 1, tensor_mib: int = 64, dtype: str = "float32") -> None:
    """compare --jobs 1 and --jobs <cores> against h5py reading the same datasets, side by side."""
    from inkling_probe.compare.parallel import default_jobs

    t0 = time.perf_counter()
    ref, cand = _scale_pair(root, gb, tensor_mib, dtype)
    total = _dump_bytes(ref) + _dump_bytes(cand)
    cores = default_jobs()
    modes = ["h5py", "1"] + ([str(cores)] if cores > 1 else [])
    print(f"pair: {total / 1e9:.2f} GB on disk ({tensor_mib} MiB {dtype} tensors, 1e-3 noise), ready in "
          f"{time.perf_counter() - t0:.0f} s; {cores} cores; {rounds} round(s) of {', '.join(modes)} (interleaved)")
    runs = {m: [] for m in modes}
    for i in range(rounds):
        for m in modes:
            runs[m].append(_scale_run(m, ref, cand))
        print(f"  round {i + 1}: " + "; ".join(f"{m} {runs[m][-1]['seconds']:.1f} s" for m in modes), flush=True)
    docs = {r["doc"] for m in modes[1:] for r in runs[m]}
    h5 = _median(runs["h5py"])
    code = _kernel_rss()
    print(f"  h5py alone          {h5['seconds']:7.1f} s wall {total / 1e6 / h5['seconds']:6.0f} MB/s | "
          f"{h5['cpu_s']:6.1f} CPU s {total / 1e6 / h5['cpu_s']:6.0f} MB per CPU s")
    for m in modes[1:]:
        med = _median(runs[m])
        ratios = sorted(h['seconds'] / r['seconds'] for h, r in zip(runs["h5py"], runs[m]))
        per_job = max(max((w["peak_rss"] - w["base_rss"] for w in r["workers"]), default=r["peak_rss"] - r["base_rss"])
                      for r in runs[m])
        print(f"  compare --jobs {m:<4} {med['seconds']:7.1f} s wall {total / 1e6 / med['seconds']:6.0f} MB/s "
              f"({h5['seconds'] / med['seconds']:.2f}x of h5py; per round {ratios[0]:.2f}-{ratios[-1]:.2f}x) | "
              f"{med['cpu_s']:6.1f} CPU s {total / 1e6 / med['cpu_s']:6.0f} MB per CPU s | peak RSS main "
              f"{med['peak_rss'] / MIB:.0f} MiB, per job {per_job / MIB:.0f} MiB over its base "
              f"({per_job / (tensor_mib * MIB):.1f}x the largest tensor; less the compiled pass's code, "
              f"{code['rss'] / MIB:.0f} MiB fixed per process: {(per_job - code['rss']) / (tensor_mib * MIB):.1f}x); "
              f"of it relations.mark {med['relations'][0]:.1f} s "
              f"wall, {med['relations'][1]:.1f} CPU s (re-reads and explains diverged rows left open, after the walk)")
    if dtype == "bfloat16":
        print("  (h5py alone reads HDF5's bfloat16 type through HDF5's software conversion to float32, which "
              "is most of its time; compare reads the raw bits and widens them itself)")
    print(f"  reports identical across jobs and rounds: {len(docs) == 1}; compiled pass "
          f"{'used' if code['kernel'] else 'NOT available (numba missing): the numpy pass measured'}")
    print("  medians over rounds; per round: h5py's time / compare's time in that round; CPU s: the process "
          "and its workers (user + system); per job: the largest peak RSS - RSS after imports")


def _median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def _dump_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", "--size", type=float, default=2.0,
                    help="size of each dump of A and C (GiB); --scale, --cluster: the pair on disk (GB)")
    ap.add_argument("--keep", default=None, help="write the dumps here and keep them (--scale: reuse them)")
    ap.add_argument("--explain-bound", action="store_true", help="only: explain on vs off on a 128 MiB culprit")
    ap.add_argument("--startup", action="store_true", help="only: compare's start-up vs import h5py, numpy")
    ap.add_argument("--scale", action="store_true", help="only: --jobs 1 / all cores vs h5py on a pair of --gib GB")
    ap.add_argument("--cluster", action="store_true",
                    help="only: --jobs <cores> vs --cluster on local Dask clusters of 2 and 4 workers, pair of --gib GB")
    ap.add_argument("--rounds", type=int, default=3, help="--scale, --cluster: rounds of every mode (interleaved; medians)")
    ap.add_argument("--tensor-mib", type=int, default=None,
                    help="--scale: size of each tensor (default 64); --cluster: default 8, many keys")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="--scale: stored dtype")
    args = ap.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="bench-compare-")
    os.makedirs(root, exist_ok=True)
    if args.scale or args.cluster:
        try:
            if args.cluster:
                same = on_cluster(root, args.gib, args.rounds, args.tensor_mib or 8, args.dtype)
            else:
                scale(root, args.gib, args.rounds, args.tensor_mib or 64, args.dtype)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if args.cluster and not same:
            raise SystemExit("reports differ between --jobs and --cluster")
        return
    if args.explain_bound or args.startup:
        try:
            if args.startup:
                startup(root)
            if args.explain_bound:
                explain_bound(root)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        return
    n8 = int(args.gib * 1024 / 8)
    configs = {
        "A": ([8] * n8, "float32"),
        "B": ([8] * (n8 // 2), "float32"),
        "C": ([128] + [8] * (n8 - 16), "float32"),
        "D": ([8] * n8, "bfloat16"),
    }
    print(f"dumps in {root}; each config: reference + candidate (1e-3 noise)")
    print(f"{'cfg':3} {'dtype':8} {'tensors':>7} {'dump MiB':>9} {'largest MiB':>11} {'write s':>7} "
          f"{'read s':>6} {'compare s':>9} {'MB/s':>7} {'base RSS MiB':>12} {'peak RSS MiB':>12} {'peak-base':>9} {'(peak-base)/largest':>19}")
    try:
        for name, (sizes, dtype) in configs.items():
            t0 = time.perf_counter()
            ref, cand = _write_pair(root, name, sizes, dtype)
            write_s = time.perf_counter() - t0
            m = _measure(ref, cand)
            total = _dump_bytes(ref) + _dump_bytes(cand)
            largest = max(sizes) * MIB
            grow = m["peak_rss"] - m["base_rss"]
            print(f"{name:3} {dtype:8} {len(sizes):7d} {_dump_bytes(ref) / MIB:9.0f} {max(sizes):11d} {write_s:7.1f} "
                  f"{m['read_seconds']:6.1f} {m['seconds']:9.2f} {total / 1e6 / m['seconds']:7.0f} {m['base_rss'] / MIB:12.0f} "
                  f"{m['peak_rss'] / MIB:12.0f} {grow / MIB:9.0f} {grow / largest:19.1f}", flush=True)
            if not args.keep:
                for p in (ref, cand):
                    shutil.rmtree(p)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("read s = a read-only pass over both dumps first (cold page cache after writing); compare s = the "
          "full compare after it; MB/s = (reference + candidate bytes on disk) / compare s; RSS from "
          "/proc/self/status (VmRSS after imports, VmHWM at the end) of the process that ran both.")


if __name__ == "__main__":
    main()

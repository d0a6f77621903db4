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
import torch, h5py, rich, inkling_probe
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
        d.tensor(k)
    d.close()
read = time.perf_counter() - t0
t0 = time.perf_counter()
rep = compare(sys.argv[1], sys.argv[2], explain=False)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "read_seconds": read, "rows": len(rep.rows), "diverged": rep.diverged,
                  "base_rss": base, "peak_rss": rss("VmHWM:"),
                  "max_error": max(r.error or 0 for r in rep.rows)}))
"""


def _measure(ref: str, cand: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, ref, cand], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _dump_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0, help="size of each dump of A and C (GiB)")
    ap.add_argument("--keep", default=None, help="write the dumps here and keep them")
    args = ap.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="bench-compare-")
    os.makedirs(root, exist_ok=True)
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

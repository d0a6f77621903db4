"""Where a recorded GPU forward waits: the model's host-device syncs and each stream's GPU time,
plain against recorded (developer tool, GPU only; torch.profiler with CUDA activity).

inkling_model's prefill forward is not purely launch-bound: its grouped experts ask the host for
each layer's experts (``torch.unique(...).tolist()``) and each expert's rows (``torch.where``), a
host-device sync each (50 host waits a forward for the small preset, measured). At a sync the host waits until the
model's stream has run everything queued before it, so GPU work queued on that stream (or GPU work
on another stream that delays it) lengthens the forward as much as host work does. Printed per
forward, plain and recorded (the process writer, durability=writer and the default):

- the host's calls that wait for the GPU (``cudaStreamSynchronize``, ``cudaEventSynchronize``,
  ``cudaDeviceSynchronize``): how many and how long in all;
- ``cudaLaunchKernel`` and ``cudaMemcpyAsync``: how many and their mean host time;
- each stream's GPU work: operations, busy time (kernels, copies, memsets).

Run from the checkout root: python3 scripts/profile_syncs.py [--forwards 5]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def summarise(trace: dict, forwards: int) -> dict:
    """Per forward: host waits, launches and copies, and each stream's GPU operations and busy ms."""
    calls = collections.defaultdict(lambda: [0, 0.0])  # runtime call -> [count, us]
    streams = collections.defaultdict(lambda: [0, 0.0])  # stream -> [operations, us]
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "cuda_runtime":
            c = calls[e["name"]]
            c[0] += 1
            c[1] += e.get("dur", 0.0)
        elif e.get("cat") in GPU_CATEGORIES:
            s = streams[(e.get("args") or {}).get("stream", "?")]
            s[0] += 1
            s[1] += e.get("dur", 0.0)

    def per_call(name: str) -> list:  # [calls a forward, mean us a call]
        n, us = calls[name]
        return [n / forwards, us / max(n, 1)]
    waits = [sum(calls[n][0] for n in WAITS), sum(calls[n][1] for n in WAITS) / 1e3]
    return {"waits": [waits[0] / forwards, waits[1] / forwards],
            "launch": per_call("cudaLaunchKernel"), "memcpy": per_call("cudaMemcpyAsync"),
            "streams": {s: [n / forwards, us / 1e3 / forwards] for s, (n, us) in sorted(streams.items(), key=str)}}


def profiled(run, forwards: int) -> tuple[float, dict]:
    """(wall ms a forward under the profiler, :func:`summarise` of its trace)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        run(forwards)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / forwards * 1e3
    with tempfile.TemporaryDirectory(prefix="profile-syncs-trace-") as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    return wall, summarise(trace, forwards)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--forwards", type=int, default=5, help="forwards profiled a variant")
    ap.add_argument("--rounds", type=int, default=2, help="times each variant is profiled, alternating")
    args = ap.parse_args()
    import warnings

    import torch

    import inkling_probe
    from bench_record import cuda_small_model
    from profile_record_cuda import start_variants

    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")  # one profile a context

    model, ids = cuda_small_model()
    root = tempfile.mkdtemp(prefix="profile-syncs-")
    recs, contexts = {"plain": None}, []

    def forwards_with(label: str, forwards: int) -> None:
        rec = recs[label]
        inkling_probe.sink._RECORDER = rec
        try:
            for _ in range(forwards):
                model(ids)
            if rec is not None:
                inkling_probe.step()
                if hasattr(rec._writer, "wait_for_ends"):
                    rec._writer.wait_for_ends()
        finally:
            inkling_probe.sink._RECORDER = None
    results = collections.defaultdict(list)
    with torch.no_grad():
        forwards_with("plain", 3)  # warm-up; start_variants runs each recording twice
        start_variants({"durability=writer": ("writer", None), "default durability": ("disk", None)}, root,
                       lambda label: forwards_with(label, 3), recs, contexts)
        for _ in range(args.rounds):
            for label in recs:
                results[label].append(profiled(lambda n: forwards_with(label, n), args.forwards))
    for ctx, rec in contexts:
        inkling_probe.sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    shutil.rmtree(root, ignore_errors=True)
    print(f"GPU {torch.cuda.get_device_name()}, inkling_model small bf16, 256 tokens, {args.forwards} forwards "
          f"a profile, {args.rounds} profiles a variant (per forward; rounds separated by |)")
    for label, rounds in results.items():
        print(f"{label}: wall under the profiler " + " | ".join(f"{w:.1f} ms" for w, _ in rounds))
        print("  host waits for the GPU: " + " | ".join(f"{s['waits'][0]:.0f} calls, {s['waits'][1]:.2f} ms"
                                                        for _, s in rounds))
        for name, key in (("cudaLaunchKernel", "launch"), ("cudaMemcpyAsync", "memcpy")):
            print(f"  {name}: " + " | ".join(f"{s[key][0]:.0f} calls, {s[key][1]:.1f} us each" for _, s in rounds))
        streams = sorted({k for _, s in rounds for k in s["streams"]}, key=str)
        for stream in streams:
            cells = [s["streams"].get(stream, [0, 0.0]) for _, s in rounds]
            print(f"  GPU stream {stream}: " + " | ".join(f"{n:.0f} ops, {ms:.2f} ms busy" for n, ms in cells))
    med = {label: statistics.median(s["waits"][1] for _, s in rounds) for label, rounds in results.items()}
    print("host waits for the GPU over plain (ms a forward, median): "
          + ", ".join(f"{label} {ms - med['plain']:+.2f}" for label, ms in med.items() if label != "plain"))


if __name__ == "__main__":
    main()

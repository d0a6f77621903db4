"""Benchmark explain against the metrics of the same pair: time and memory on a 128 MiB fp32 pair.

Issue 8's bound: explain stays within 2x the time of measuring the pair and within 3x the largest
tensor's memory. Each case runs in a fresh process that builds the pair ([8192, 4096] fp32 = 128
MiB per side), runs explain once to read its peak RSS growth (getrusage ru_maxrss over the RSS once
the pair is built), then times metrics and explain alternately (best of --repeat, wall and CPU
time: CPU time is what a shared machine's load disturbs least), and last reads the peak of numpy's
allocations under tracemalloc for each. The bench itself is numpy only.

"metrics" is a numpy rendering of docs/COMPARE.md part 2 (rel_rms, cosine, max_abs and its index,
max_rel, sqnr, outside, mismatch, NaN/Inf counts) in 512 Ki-element float64 chunks, as compare's
read side computes them. Cases:
  noise    c = r + 5% noise: diverged and explained by nothing (every hypothesis tried: the worst case)
  ratio    c = 2688 r: the constant ratio holds (verified on the whole)
  rows     c = r with 8 token rows doubled: confined (read off the one-pass sums)
  channel  c = r / w per channel: a norm weight not applied (verified on the whole)
  qkv      the last dim's q/k/v chunks [2048, 1024, 1024] in order [k, q, v] (head_dim 128)

    python scripts/bench_explain.py [--repeat 3] [--cases noise,ratio]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc

import numpy as np

SHAPE = (8192, 4096)  # 32 Mi fp32 values: 128 MiB
CHUNK = 1 << 19
MIB = 1 << 20
CASES = ("noise", "ratio", "rows", "channel", "qkv")
CONTEXT = {"noise": 0.01, "token_dim": 0, "head_dim": 128, "tp_sizes": (2,)}


def metrics(r: np.ndarray, c: np.ndarray) -> dict:
    """docs/COMPARE.md part 2 in float64 chunks (the reference implementation of this bench)."""
    rf, cf = r.reshape(-1), c.reshape(-1)
    dd = rr = rc = cc = 0.0
    max_abs, max_at, r_max, outside, mismatch, bad = 0.0, -1, 0.0, 0, 0, 0
    for a in range(0, rf.size, CHUNK):
        rb, cb = rf[a:a + CHUNK].astype(np.float64), cf[a:a + CHUNK].astype(np.float64)
        both = np.isfinite(rb) & np.isfinite(cb)
        bad += rb.size - int(np.count_nonzero(both))
        if not both.all():
            rb, cb = np.where(both, rb, 0.0), np.where(both, cb, 0.0)
        d = np.abs(cb - rb)
        i = int(np.argmax(d))
        if d[i] > max_abs:
            max_abs, max_at = float(d[i]), a + i
        r_max = max(r_max, float(np.abs(rb).max()))
        dd += float(np.einsum("i,i->", d, d))
        rr += float(np.einsum("i,i->", rb, rb))
        rc += float(np.einsum("i,i->", rb, cb))
        cc += float(np.einsum("i,i->", cb, cb))
        outside += int(np.count_nonzero(d > 1e-5 * (1 + np.abs(rb))))
        mismatch += int(np.count_nonzero(d))
    return {"rel_rms": (dd / rr) ** 0.5, "cosine": rc / (rr * cc) ** 0.5, "max_abs": max_abs,
            "max_abs_index": np.unravel_index(max_at, r.shape), "max_rel": max_abs / r_max,
            "sqnr_db": 10 * np.log10(rr / dd) if dd else np.inf, "outside": outside / rf.size,
            "mismatch": mismatch / rf.size, "nonfinite": bad}


def build(case: str) -> tuple[np.ndarray, np.ndarray, dict]:
    g = np.random.default_rng(0)
    r = g.standard_normal(SHAPE, dtype=np.float32)
    ctx = dict(CONTEXT)
    if case == "noise":
        c = g.standard_normal(SHAPE, dtype=np.float32)
        c *= np.float32(0.05)
        c += r
    elif case == "ratio":
        c = r * np.float32(2688)
    elif case == "rows":
        c = r.copy()
        c[[100, 900, 2000, 3100, 5000, 6000, 7000, 8000]] *= np.float32(2.0)
    elif case == "channel":
        c = r / g.uniform(0.5, 1.5, SHAPE[1]).astype(np.float32)
    elif case == "qkv":
        c = np.concatenate([r[:, 2048:3072], r[:, :2048], r[:, 3072:]], axis=1)
    else:
        raise SystemExit(f"unknown case {case!r}")
    return r, c, ctx


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / MIB


def _timed(fn) -> tuple[float, float, object]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def _traced(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / MIB
    tracemalloc.stop()
    return peak


def child(case: str, repeat: int) -> dict:
    from inkling_probe.compare.explain import explain

    r, c, ctx = build(case)
    phases = {"metrics": lambda: metrics(r, c), "explain": lambda: explain(r, c, **ctx)}
    base = max(rss_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    found = phases["explain"]()  # first: its peak RSS growth is explain's own
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    res = {ph: {"wall": [], "cpu": []} for ph in phases}
    for _ in range(repeat):  # alternate, so that load from other processes hits both alike
        for ph, fn in phases.items():
            w, cpu, _ = _timed(fn)
            res[ph]["wall"].append(w)
            res[ph]["cpu"].append(cpu)
    out = {ph: {"wall": min(v["wall"]), "cpu": min(v["cpu"]), "traced_mib": _traced(phases[ph])}
           for ph, v in res.items()}
    out["explain"]["rss_mib"] = rss
    out["explain"]["found"] = [f.name for f in found]
    out["torch"] = "torch" in sys.modules
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return
    tensor = np.prod(SHAPE) * 4 / MIB
    print(f"pair: 2 x {list(SHAPE)} float32 ({tensor:.0f} MiB each); bounds: explain <= 2x metrics time, "
          f"extra memory <= 3x {tensor:.0f} MiB; best of {args.repeat}, metrics and explain alternating")
    print(f"{'case':8} {'metrics s':>9} {'explain s':>9} {'wall x':>6} {'cpu x':>6} {'rss+ MiB':>8} "
          f"{'traced MiB':>10} {'x tensor':>8}  findings")
    for case in args.cases.split(","):
        got = json.loads(subprocess.run([sys.executable, __file__, "--repeat", str(args.repeat), "--child", case],
                                        capture_output=True, text=True, check=True).stdout)
        m, e = got["metrics"], got["explain"]
        mem = max(e["rss_mib"], e["traced_mib"])
        print(f"{case:8} {m['wall']:9.3f} {e['wall']:9.3f} {e['wall'] / m['wall']:6.2f} {e['cpu'] / m['cpu']:6.2f} "
              f"{e['rss_mib']:8.1f} {e['traced_mib']:10.1f} {mem / tensor:8.2f}  {e['found']}")
    print(f"metrics' own traced peak: {m['traced_mib']:.1f} MiB (last case); torch in sys.modules of the bench "
          f"process: {got['torch']} (imported with inkling_probe.compare, before the pair is built)")


if __name__ == "__main__":
    main()

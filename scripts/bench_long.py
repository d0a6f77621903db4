"""Long runs: hundreds of decode steps recorded and compared; time per step by hundred (issue 26).

Records ``--steps`` decode steps (``--keys`` probes a step, one token row ``[1, --width]`` each,
after a prefill step of ``--prompt`` tokens) twice, the candidate with 1e-3 relative noise, then
compares them. Prints, for recording and for compare, the mean time per step over each hundred
steps and the ratio last hundred / first hundred (flat: about 1), plus the segment count, the
open files of the process at the end and its peak RSS.

    .venv/bin/python scripts/bench_long.py [--steps 500] [--keys 40] [--width 256] [--jobs 1]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def record(path: str, steps: int, keys: int, width: int, prompt: int, noise: float) -> list[float]:
    """Seconds per step (probes + the step boundary), prefill excluded."""
    import torch

    import inkling_probe

    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(1, width, generator=gen) for _ in range(keys)]
    times = []
    with inkling_probe.recording(path):
        inkling_probe.step()
        for k in range(keys):
            inkling_probe.probe(f"layers.{k // 4}.p{k % 4}", torch.randn(prompt, width, generator=gen))
        for s in range(steps):
            t0 = time.perf_counter()
            inkling_probe.step()
            for k, x in enumerate(xs):
                y = x * (1 + s * 1e-3)
                if noise:
                    y = y + noise * torch.randn(y.shape, generator=gen)
                inkling_probe.probe(f"layers.{k // 4}.p{k % 4}", y)
            times.append(time.perf_counter() - t0)
    return times


def compare_times(ref: str, cand: str, jobs: int) -> tuple[list[float], list[float], float]:
    """Wall and CPU (this thread's) seconds per step of compare's walk (from its progress
    callback), and the whole call's wall time."""
    from inkling_probe.compare import compare

    wall: dict[int, float] = {}
    cpu: dict[int, float] = {}
    state = {"t": None, "c": None}
    steps = []

    def progress(done, total, key):
        now, now_c = time.perf_counter(), time.thread_time()
        step = steps[done - 1] if done - 1 < len(steps) else -1
        wall[step] = wall.get(step, 0.0) + (now - state["t"])
        cpu[step] = cpu.get(step, 0.0) + (now_c - state["c"])
        state["t"], state["c"] = now, now_c

    import inkling_probe
    d = inkling_probe.open(ref)
    steps.extend(r["step"] for r in d.index)  # execution order = compare's row order (one rank)
    d.close()
    t0 = state["t"] = time.perf_counter()
    state["c"] = time.thread_time()
    compare(ref, cand, explain=False, progress=progress, jobs=jobs)
    total = time.perf_counter() - t0
    return [wall[s] for s in sorted(wall) if s >= 1], [cpu[s] for s in sorted(cpu) if s >= 1], total


def by_hundred(times: list[float]) -> list[float]:
    return [sum(times[i:i + 100]) / len(times[i:i + 100]) for i in range(0, len(times), 100)]


def show(label: str, times: list[float]) -> float:
    h = by_hundred(times)
    cells = " | ".join(f"{x * 1e3:.2f}" for x in h)
    print(f"{label:12s} ms/step by hundred: {cells}   last/first {h[-1] / h[0]:.2f}x")
    return h[-1] / h[0]


def flat_claim(label: str, runs: list[list[float]]) -> None:
    """last/first over repeats, against the noise: how much one hundred's mean moves between repeats."""
    hundreds = [by_hundred(t) for t in runs]
    ratios = sorted(h[-1] / h[0] for h in hundreds)
    spread = max(max(col) / min(col) for col in zip(*hundreds))
    print(f"{label:12s} last/first over {len(runs)} repeats: median {ratios[len(ratios) // 2]:.2f}x "
          f"[{ratios[0]:.2f}-{ratios[-1]:.2f}]; noise: the same hundred moves up to {spread:.2f}x between repeats")


def rss_peak() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--keys", type=int, default=40)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", help="write the dumps here and keep them (reused when already there)")
    ap.add_argument("--repeats", type=int, default=3, help="compare runs over the same dumps (noise estimate)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    root = a.keep or tempfile.mkdtemp(prefix="bench-long-")
    ref, cand = os.path.join(root, "ref"), os.path.join(root, "cand")
    marker = os.path.join(root, f"done-{a.steps}-{a.keys}-{a.width}-{a.prompt}")
    try:
        if not os.path.exists(marker):
            for p in (ref, cand):
                shutil.rmtree(p, ignore_errors=True)
            t_ref = record(ref, a.steps, a.keys, a.width, a.prompt, 0.0)
            t_cand = record(cand, a.steps, a.keys, a.width, a.prompt, 1e-3)
            open(marker, "w").close()
        else:
            t_ref = t_cand = None
        segs = len([f for f in os.listdir(ref) if f.endswith(".h5")])
        print(f"{a.steps} decode steps x {a.keys} probes [1, {a.width}] fp32 (+ a {a.prompt}-token prefill); "
              f"{segs} segment file(s) per dump" + ("" if t_ref else " (dumps reused: recording not timed)"))
        if t_ref:
            show("record", t_ref)
            show("record'", t_cand)
        t0 = time.perf_counter()
        import inkling_probe
        d = inkling_probe.open(ref)
        n = len(d.index)
        d.close()
        print(f"open + index of {n} rows: {time.perf_counter() - t0:.2f} s")
        walls, cpus = [], []
        for i in range(a.repeats):
            wall, cpu, total = compare_times(ref, cand, a.jobs)
            walls.append(wall)
            cpus.append(cpu)
            show(f"compare #{i + 1}", wall)
            show(f"  CPU #{i + 1}", cpu)
            print(f"  total {total:.2f} s (--jobs {a.jobs})", flush=True)
        flat_claim("compare", walls)
        flat_claim("compare CPU", cpus)
        print(f"open files now {len(os.listdir('/proc/self/fd'))}; peak RSS {rss_peak()} MB "
              "(CPU: the walking thread's own time, which other jobs on the machine disturb less than wall time)")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Where a recorded GPU forward's time goes in the recording process, per thread and per function
(inkling_model small bf16, 256 tokens, process writer): wall and CPU time of the recording thread,
the drain thread and the writer process, their run-queue waits and context switches (from
/proc/<pid>/task/<tid>/schedstat and status), and wall / CPU time inside the recorder's functions
(perf_counter_ns and thread_time_ns around each call). Then torch.profiler's CPU-side table for two
recorded forwards, and a cProfile of them (Python 3.12's cProfile sees every thread).

A developer's tool (it patches internals); needs a CUDA GPU.
Run: python3 scripts/profile_record_cuda.py [--rounds 7] [--forwards 4] [--no-torch-profiler]
Outputs under $OUT (or /tmp): torch profiler trace record_trace.json.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import tempfile
import threading
import time

import torch

from bench_record import cuda_small_model, disk_rate  # this folder, on sys.path
from bench_record_parts import no_writer  # the writer gets nothing ('drain, no writer')

import inkling_probe  # bench_record put the checkout on sys.path
from inkling_probe import sink
from inkling_probe.recorder import drain as D, host_writer as HW, recorder as R, staging as S, step_batch as B
from inkling_probe.store import writer_process as WP

CALLS: dict = {}  # tag -> [calls, wall ns, cpu ns]


def timed(owner, name: str, tag: str) -> None:
    """Patch ``owner.name`` to add its calls' wall and thread-CPU nanoseconds to CALLS[tag]."""
    orig = getattr(owner, name)

    def call(*a, **k):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            return orig(*a, **k)
        finally:
            s = CALLS.setdefault(tag, [0, 0, 0])
            s[0] += 1
            s[1] += time.perf_counter_ns() - w0
            s[2] += time.thread_time_ns() - c0
    setattr(owner, name, call)


def instrument() -> None:
    for owner, name, tag in (
            (R.Recorder, "record", "m.record"), (R.Recorder, "next_step", "m.next_step"),
            (D.Drain, "_seal", "m.seal"), (D.Drain, "_pump", "m.pump"), (D.Drain, "_handle", "x.handle"), (B.StepBatch, "append", "m.append"), (D.Drain, "flush", "m.flush"),
            (WP.ProcessWriter, "_acks_due", "m.acks_due"),
            (D.Drain, "_drain_batch", "d.batch"), (D.Drain, "_drain_one", "d.one"),
            (S.CudaStager, "wait", "d.event_wait"), (HW.HostWriter, "write_batch", "d.write_batch"),
            (HW.HostWriter, "write", "d.write_one"), (WP.ProcessWriter, "_send_payload", "d.send")):
        if hasattr(owner, name):
            timed(owner, name, tag)


def task_stats(pid: int | str, tid: int | str) -> tuple[int, int, int, int]:
    """(CPU ns, run-queue wait ns, voluntary, involuntary context switches) of one thread."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            run, wait, _ = (int(x) for x in f.read().split())
        vol = invol = 0
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol = int(line.split()[1])
        return run, wait, vol, invol
    except (OSError, ValueError):
        return 0, 0, 0, 0


def process_stats(pid: int) -> tuple[int, int, int, int]:
    """task_stats summed over every thread of ``pid``."""
    total = [0, 0, 0, 0]
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0, 0, 0
    for tid in tids:
        for i, v in enumerate(task_stats(pid, tid)):
            total[i] += v
    return tuple(total)


def snapshot(rec) -> dict:
    me = threading.get_native_id()
    snap = {"main": task_stats("self", me)}
    drain = getattr(rec, "_drain", None) if rec is not None else None
    thread = getattr(drain, "_thread", None)  # None: the recording thread hands over
    snap["drain"] = task_stats("self", thread.native_id) if thread is not None else (0, 0, 0, 0)
    proc = getattr(getattr(rec, "_writer", None), "_proc", None)
    snap["writer"] = process_stats(proc.pid) if proc is not None else (0, 0, 0, 0)
    others = [0, 0, 0, 0]  # the recording process's other threads (CUDA's, torch's)
    for tid in os.listdir("/proc/self/task"):
        if int(tid) not in (me, thread.native_id if thread is not None else -1):
            for i, v in enumerate(task_stats("self", tid)):
                others[i] += v
    snap["others"] = tuple(others)
    snap["calls"] = {k: list(v) for k, v in CALLS.items()}
    return snap


VARIANTS = {"record() only": ("writer", lambda rec: setattr(rec, "_staged", lambda row, t: None)),
            "drain, no writer": ("writer", no_writer),
            "durability=writer": ("writer", None),
            "durability=disk": ("disk", None)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--forwards", type=int, default=4)
    ap.add_argument("--no-torch-profiler", action="store_true")
    ap.add_argument("--variants", default=";".join(VARIANTS), help="names separated by ;")
    args = ap.parse_args()
    out = os.environ.get("OUT", tempfile.gettempdir())
    instrument()
    model, ids = cuda_small_model()
    root = tempfile.mkdtemp(prefix="profile-record-")
    names = [n for n in args.variants.split(";") if n]
    recs, contexts = {}, []

    def run(name):
        rec = recs.get(name)
        sink._RECORDER = rec
        t0 = time.perf_counter()
        for _ in range(args.forwards):
            model(ids)
        if rec is not None:
            inkling_probe.step()
            if hasattr(rec._writer, "wait_for_ends"):
                rec._writer.wait_for_ends()
        torch.cuda.synchronize()
        sink._RECORDER = None
        return time.perf_counter() - t0

    with torch.no_grad():
        start_variants({n: VARIANTS[n] for n in names}, root, run, recs, contexts)
        order = ["plain", *names]
        samples = {n: [] for n in order}
        for _ in range(args.rounds):
            for n in order:
                before = snapshot(recs.get(n))
                wall = run(n)
                after = snapshot(recs.get(n))
                samples[n].append((wall, before, after))
        report(samples, args.forwards)
        if not args.no_torch_profiler:
            profile_forwards(run, recs, out)
    for ctx, rec in contexts:
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    shutil.rmtree(root, ignore_errors=True)
    print(f"disk {disk_rate():.0f} MB/s")


def start_variants(variants: dict, root: str, run, recs: dict, contexts: list) -> None:
    """A process-writer recording for each of ``variants`` (name -> (durability, patch or None)) in
    its own folder under ``root``, into ``recs[name]`` and ``contexts`` ((context, recorder), to exit
    later): each runs once (``run(name)``: its writer, drain and batches are made), is patched, runs
    once more."""
    for name, (durability, patch) in variants.items():
        ctx = inkling_probe.recording(os.path.join(root, str(len(contexts))), writer="process",
                                      durability=durability)
        recs[name] = ctx.__enter__()
        contexts.append((ctx, recs[name]))
        sink._RECORDER = None
        run(name)
        if patch:
            patch(recs[name])
        run(name)


def report(samples: dict, forwards: int) -> None:
    base = statistics.median(w for w, _, _ in samples["plain"]) / forwards
    print(f"ms a forward (median of rounds, {forwards} forwards a round); threads: CPU | run-queue wait | "
          "voluntary / involuntary switches a forward")
    for n, runs in samples.items():
        wall = statistics.median(w for w, _, _ in runs) / forwards
        line = [f"{n:22s} wall {wall * 1e3:6.1f} ({wall / base:.2f}x)"]
        for who in ("main", "drain", "others", "writer"):
            d = [statistics.median((a[who][i] - b[who][i]) for _, b, a in runs) / forwards for i in range(4)]
            line.append(f"{who} {d[0] / 1e6:5.1f} | {d[1] / 1e6:4.1f} | {d[2]:5.0f}/{d[3]:3.0f}")
        print("  " + "  ".join(line))
        tags = sorted(set().union(*(a["calls"] for _, _, a in runs)))
        parts = []
        for tag in tags:
            d = [statistics.median(a["calls"].get(tag, [0, 0, 0])[i] - b["calls"].get(tag, [0, 0, 0])[i]
                                   for _, b, a in runs) / forwards for i in range(3)]
            if d[0]:
                parts.append(f"{tag} {d[0]:.0f}x {d[1] / 1e6:.2f}/{d[2] / 1e6:.2f}")
        if parts:
            print("      calls a forward: count wall/CPU ms: " + ", ".join(parts))


def profile_forwards(run, recs: dict, out: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    for name in ("durability=writer",):
        if name not in recs:
            continue
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run(name)
        print(f"-- torch.profiler, {name}, one round (self CPU):")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
        prof.export_chrome_trace(os.path.join(out, "record_trace.json"))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run("plain")
        print("-- torch.profiler, plain, one round (self CPU):")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
    for name in ("durability=writer", "durability=disk"):
        if name not in recs:
            continue
        p = cProfile.Profile()
        p.runcall(run, name)
        s = io.StringIO()
        pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(30)
        print(f"-- cProfile, {name}, one round (tottime):\n{s.getvalue()}")


if __name__ == "__main__":
    main()

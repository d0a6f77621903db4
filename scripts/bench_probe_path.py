"""What one eager probe costs the recording thread, out of the model: the CUDA and torch calls the
per-probe path makes (ns a call, in a tight loop), then ``Recorder.record`` over one forward's
probes of inkling_model small bf16 (256 tokens, process writer, ``durability=writer``), called back
to back without the model: the whole path, and the path with nothing staged. Then a cProfile of it.
Then placement rounds (interleaved, ratio to plain): the writer process with its threads kept off
the recording thread's core, writer_threads=0, and the probes' copies alone (by cudaMemcpyAsync or
by an SM kernel), to tell the CPU's share from the GPU's.

The forward is launch-bound (every microsecond of the recording thread is the forward's), so these
per-call costs, times the probes a forward, are what a recorded forward pays on top of plain.

A developer's tool (it patches internals); needs a CUDA GPU.
Run (from the checkout's root): python3 scripts/bench_probe_path.py [--forwards 40] [--placement-rounds 9]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time

from bench_record import cuda_small_model  # this folder, on sys.path

import inkling_probe  # bench_record put the checkout on sys.path
from inkling_probe import sink
from inkling_probe.recorder import cudart


class Catcher:
    """A stand-in recorder that keeps every probe call of one forward (name, tensor copy, options)."""

    def __init__(self):
        self.calls = []

    def record(self, name, tensor, **options):
        self.calls.append((name, tensor.detach().clone(), options))

    def next_step(self):
        pass


def per_call_ns(fn, n: int = 20000) -> float:
    """Median over 5 rounds of ``fn()``'s ns a call, less an empty call's."""
    def rounds(f):
        out = []
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                f()
            out.append((time.perf_counter_ns() - t0) / n)
        return statistics.median(out)
    return rounds(fn) - rounds(lambda: None)


def primitives(t) -> None:
    import torch

    memcpy = cudart._device_memcpy()
    dst = torch.empty_like(t)
    stream = cudart._raw_stream()(0)
    event = torch.cuda.Event()
    event.record()
    torch.cuda.synchronize()
    nbytes = t.numel() * t.element_size()
    calls = {
        "t.is_cuda": lambda: t.is_cuda,
        "t.dtype": lambda: t.dtype,
        "t.numel()": lambda: t.numel(),
        "tuple(t.shape)": lambda: tuple(t.shape),
        "t.data_ptr()": lambda: t.data_ptr(),
        "t.is_contiguous()": lambda: t.is_contiguous(),
        "t.requires_grad": lambda: t.requires_grad,
        "t.get_device()": lambda: t.get_device(),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "raw current stream": lambda: cudart._raw_stream()(0),
        "torch.cuda.is_current_stream_capturing()": torch.cuda.is_current_stream_capturing,
        "event.query() (done)": event.query,
        f"cudaMemcpyAsync D2D {nbytes >> 10} KB (ctypes)": lambda: memcpy(dst.data_ptr(), t.data_ptr(), nbytes, 3, stream),
        "dst.copy_(t)": lambda: dst.copy_(t),
        "torch.add(t, 1) (a kernel launch through torch)": lambda: torch.add(t, 1),
        "event.record()": event.record,
    }
    driver = _driver_memcpy()
    if driver is not None:
        calls[f"cuMemcpyDtoDAsync {nbytes >> 10} KB (ctypes, libcuda)"] = \
            lambda: driver(dst.data_ptr(), t.data_ptr(), nbytes, stream)
    calls[f"cudaMemcpyAsync kind=default {nbytes >> 10} KB"] = \
        lambda: memcpy(dst.data_ptr(), t.data_ptr(), nbytes, 4, stream)
    print("primitives, ns a call (tight loop; the GPU idle, so copies don't queue up):")
    for label, fn in calls.items():
        ns = per_call_ns(fn, 2000 if "Memcpy" in label or "copy_" in label else 20000)
        torch.cuda.synchronize()
        print(f"  {label:45s} {ns:8.0f}")


def _driver_memcpy():
    """libcuda's cuMemcpyDtoDAsync_v2 through ctypes, or None."""
    import ctypes

    try:
        fn = ctypes.CDLL("libcuda.so.1").cuMemcpyDtoDAsync_v2
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    return fn


def siblings(cpu: int) -> set:
    """The logical CPUs sharing ``cpu``'s physical core (itself included)."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            text = f.read().strip()
    except OSError:
        return {cpu}
    out = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def pin_writer(rec, cpus: set) -> None:
    """Every thread of the recording's writer process onto ``cpus`` (threads made later inherit)."""
    proc = getattr(rec._writer, "_proc", None)  # None: not open yet (the warm-up run opens it)
    if proc is None:
        return
    pid = proc.pid
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def copies_only(rec, kernel: bool) -> None:
    """Each probe: one copy into a 128 MB device buffer (wrapping), nothing else: a cudaMemcpyAsync
    (as the batches do), or ``kernel``: an elementwise kernel (x * 1, timing only) on the SMs, to see
    whether the copies cost the forward on the GPU's side (a copy engine between kernels)."""
    import torch

    buf = torch.empty(1 << 26, device="cuda", dtype=torch.bfloat16)
    memcpy, base, cap, at = cudart._device_memcpy(), buf.data_ptr(), buf.numel() * 2, [0]
    raw = torch._C._cuda_getCurrentRawStream

    def staged(row, x):
        n = x.numel() * x.element_size()
        if at[0] + n > cap:
            at[0] = 0
        if x.is_contiguous() and x.dtype == torch.bfloat16:
            if kernel:
                torch.mul(x, 1, out=buf[at[0] // 2: at[0] // 2 + x.numel()].view(x.shape))
            else:
                memcpy(base + at[0], x.data_ptr(), n, 3, raw(x.get_device()))
        at[0] += -(-n // 512) * 512
    rec._staged = staged


def placement(model, ids, repeats: int) -> None:
    """Interleaved rounds: plain and durability=writer, free and with the recording thread pinned to
    one CPU and the writer's threads kept off that physical core; and writer_threads=0."""
    import torch

    from bench_record import interleaved, prune_finished_steps, _spread

    everything = os.sched_getaffinity(0)
    main_cpu = min(everything)
    core = siblings(main_cpu)
    rest = everything - core
    print(f"\nplacement: {len(everything)} CPUs; the recording thread's core {sorted(core)} (siblings), "
          f"the writer on {len(rest)} others when pinned")
    root = tempfile.mkdtemp(prefix="probe-place-")
    steps = 3

    def plain():
        for _ in range(steps):
            model(ids)
        torch.cuda.synchronize()

    recs = {}
    for label, options in {"writer": dict(durability="writer"), "writer pinned": dict(durability="writer"),
                           "writer, 0 threads": dict(durability="writer", writer_threads=0),
                           "copies only, memcpy": dict(durability="writer"),
                           "copies only, kernel": dict(durability="writer"),
                           "disk": dict(), "disk pinned": dict()}.items():
        ctx = inkling_probe.recording(os.path.join(root, label.replace(" ", "_").replace(",", "")),
                                      writer="process", **options)
        recs[label] = (ctx, ctx.__enter__())
        sink._RECORDER = None

    def recorded(label):
        rec = recs[label][1]
        if label.startswith("copies only"):
            copies_only(rec, kernel=label.endswith("kernel"))
        pinned = "pinned" in label

        def run():
            if pinned:
                os.sched_setaffinity(0, {main_cpu})
                pin_writer(rec, rest)
            sink._RECORDER = rec
            try:
                for _ in range(steps):
                    model(ids)
                inkling_probe.step()
                if hasattr(rec._writer, "wait_for_ends"):
                    rec._writer.wait_for_ends()
                torch.cuda.synchronize()
            finally:
                sink._RECORDER = None
                if pinned:
                    os.sched_setaffinity(0, everything)
                    pin_writer(rec, everything)
        return run

    def plain_pinned():
        os.sched_setaffinity(0, {main_cpu})
        try:
            plain()
        finally:
            os.sched_setaffinity(0, everything)

    gc_time = {}  # variant -> [seconds in the cyclic garbage collector, collections by generation]
    now, started = [None], [0.0]

    def on_gc(phase, info):
        if now[0] is None:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            seen = gc_time.setdefault(now[0], [0.0, [0, 0, 0]])
            seen[0] += time.perf_counter() - started[0]
            seen[1][info["generation"]] += 1

    def counted(label, fn):
        def run():
            now[0] = label
            try:
                fn()
            finally:
                now[0] = None
        return run

    import gc
    gc.callbacks.append(on_gc)
    fns = {"plain": plain, "plain pinned": plain_pinned, **{k: recorded(k) for k in recs}}
    with torch.no_grad():
        t = interleaved({k: counted(k, f) for k, f in fns.items()}, repeats,
                        after=lambda: prune_finished_steps(root))
    gc.callbacks.remove(on_gc)
    for ctx, rec in recs.values():
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    print(f"plain {statistics.median(t['plain']) / steps * 1e3:.1f} ms/forward, {repeats} rounds of {steps}")
    forwards = (repeats + 1) * steps
    for k in t:
        seconds, counts = gc_time.get(k, [0.0, [0, 0, 0]])
        ratio = _spread(t[k], t['plain']) if k != "plain" else "1.00x"
        print(f"  {k:20s} {ratio:24s} garbage collector {seconds / forwards * 1e3:.2f} ms a forward, "
              f"collections by generation {counts} in {forwards} forwards")


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--forwards", type=int, default=40)
    ap.add_argument("--placement-rounds", type=int, default=9)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_probe_path: needs a CUDA GPU")
    model, ids = cuda_small_model()
    catcher = Catcher()
    sink._RECORDER = catcher
    with torch.no_grad():
        model(ids)
    sink._RECORDER = None
    calls = catcher.calls
    with torch.no_grad():
        for _ in range(3):
            model(ids)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            t0 = time.perf_counter_ns()
            model(ids)
            torch.cuda.synchronize()
            times.append(time.perf_counter_ns() - t0)
    print(f"plain forward {statistics.median(times) / 1e6:.1f} ms ({len(calls)} probes)")
    primitives(next(t for _, t, _ in calls if t.dtype == torch.bfloat16 and t.numel() >= 1 << 15))

    root = tempfile.mkdtemp(prefix="probe-path-")
    variants = {"whole path": None, "nothing staged": lambda rec: setattr(rec, "_staged", lambda row, t: None)}
    print(f"\nRecorder.record over one forward's {len(calls)} probes, back to back without the model "
          f"(process writer, durability=writer); ms a forward, median of {args.forwards}:")
    for label, patch in variants.items():
        with inkling_probe.recording(os.path.join(root, label.replace(" ", "_")), writer="process",
                                     durability="writer") as rec:
            if patch is not None:
                patch(rec)
            times = []
            for _ in range(args.forwards):
                t0 = time.perf_counter_ns()
                rec.next_step()
                for name, t, options in calls:
                    rec.record(name, t, **options)
                times.append(time.perf_counter_ns() - t0)
            torch.cuda.synchronize()
            print(f"  {label:20s} {statistics.median(times) / 1e6:7.2f} ms  ({statistics.median(times) / len(calls) / 1e3:.1f} us a probe)")
            if patch is None:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(10):
                    rec.next_step()
                    for name, t, options in calls:
                        rec.record(name, t, **options)
                prof.disable()
                torch.cuda.synchronize()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
                profile_text = out.getvalue()
    print("\ncProfile of the whole path, 10 forwards, by own time:")
    print(profile_text)
    sys.stdout.flush()
    if args.placement_rounds:
        placement(model, ids, args.placement_rounds)


if __name__ == "__main__":
    main()

"""Where a recorded GPU forward's extra time goes: the recording side's parts switched off one by one,
side by side with the plain forward (inkling_model small bf16, 256 tokens, process writer).

  record() only        probes filtered and indexed, nothing copied
  drain, no writer     copies, batches, statistics and device-to-host copies (into pooled pinned
                       buffers); the writer gets nothing
  ... spinning events  the same with the drain thread spinning in cudaEventSynchronize (the old way)
  ... logits one by one  the same with a float tensor too large for the batch copied on its own
  ... fp32 one by one  the same with float32 tensors copied one by one (only bf16 batched)
  durability=writer    everything, step() waiting for the step before
  durability=disk      everything, step() waiting for the step just ended (the default)

A developer's tool (it patches internals); needs a CUDA GPU. Run: python scripts/bench_record_parts.py
[--profile]  (--profile: then a cProfile of the recording thread for two of the variants)
"""
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time

import torch

from bench_record import cuda_small_model, d2h_rate, disk_rate, stored_mb  # this folder, on sys.path

import inkling_probe  # bench_record put the checkout on sys.path
from inkling_probe import sink
from inkling_probe.record import staging

FORWARDS = 4  # a timed run
ROUNDS = 7


def spinning_events(stager) -> None:
    def record():
        with stager._room:
            event = stager._events.pop() if stager._events else torch.cuda.Event()
        event.record()
        return event
    stager._events.clear()
    stager.record = record


def no_writer(rec) -> None:
    """The writer gets nothing; staging goes through pooled pinned buffers (slots of the writer's
    ring would never be freed without it)."""
    pooled = staging.CudaStager()
    drain = rec._drain
    drain.stager.close()  # the ring stager it replaces: unregistered (everything before is on disk)
    for batch in (drain.batch, *drain._open.values()):
        batch.stager = pooled
    drain.stager = pooled
    drain._write_batch = lambda rows, host, spans, sums, done: done()
    drain._write = lambda row, host, done, stats: done()


def nothing_staged(rec) -> None:
    rec._staged = lambda row, t: None


def no_batch_of_its_own(rec) -> None:
    rec._drain.batch.takes_alone = lambda t: False


def bf16_batches_only(rec) -> None:
    batch = rec._drain.batch
    takes = batch.takes
    batch.takes = lambda t: t.dtype is torch.bfloat16 and takes(t)


VARIANTS = {  # name: (durability, patch applied once the recorder's drain exists)
    "record() only": ("writer", nothing_staged),
    "drain, no writer": ("writer", no_writer),
    "drain, no writer, spinning events": ("writer", lambda rec: (no_writer(rec), spinning_events(rec._drain.stager))),
    "drain, no writer, logits one by one": ("writer", lambda rec: (no_writer(rec), no_batch_of_its_own(rec))),
    "drain, no writer, fp32 one by one": ("writer", lambda rec: (no_writer(rec), bf16_batches_only(rec))),
    "durability=writer": ("writer", None),
    "durability=disk": ("disk", None),
}


def main() -> None:
    model, ids = cuda_small_model()
    root = tempfile.mkdtemp(prefix="bench-parts-")
    recs = {}

    def run(name):
        rec = recs.get(name)
        sink._RECORDER = rec
        t0 = time.perf_counter()
        for _ in range(FORWARDS):
            model(ids)
        if rec is not None:
            inkling_probe.step()
            if hasattr(rec._writer, "wait_for_ends"):
                rec._writer.wait_for_ends()  # every run ends with its steps on disk
        torch.cuda.synchronize()
        sink._RECORDER = None
        return (time.perf_counter() - t0) / FORWARDS

    contexts = []
    with torch.no_grad():
        for name, (durability, patch) in VARIANTS.items():
            ctx = inkling_probe.recording(os.path.join(root, str(len(contexts))), writer="process",
                                          durability=durability)
            recs[name] = ctx.__enter__()
            contexts.append((ctx, recs[name]))
            sink._RECORDER = None
            run(name)  # creates the drain
            if patch:
                patch(recs[name])
            run(name)
        names = ["plain", *VARIANTS]
        times = {n: [] for n in names}
        run("plain")
        for _ in range(ROUNDS):
            for n in names:
                times[n].append(run(n))
        if "--profile" in sys.argv:  # where the recording thread's CPU goes, per function
            for name in ("drain, no writer", "durability=disk"):
                profile = cProfile.Profile()
                profile.runcall(run, name)
                print(f"-- cProfile of the recording thread, {name}, {FORWARDS} forwards (tottime):")
                pstats.Stats(profile).sort_stats("tottime").print_stats(22)
    for ctx, rec in contexts:
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    mb = stored_mb(inkling_probe.open(os.path.join(root, str(len(contexts) - 1))), step=1)
    disk, d2h = disk_rate(), d2h_rate()
    base = statistics.median(times["plain"])
    print(f"GPU {torch.cuda.get_device_name()}, {FORWARDS} forwards a run, {ROUNDS} rounds interleaved; "
          f"median ms/forward, ratio to plain [quartiles]")
    for n in names:
        ratios = statistics.quantiles([a / b for a, b in zip(times[n], times["plain"])], n=4)
        print(f"  {n:36s} {statistics.median(times[n]) * 1e3:6.1f}  {statistics.median(times[n]) / base:.2f}x "
              f"[{ratios[0]:.2f}-{ratios[2]:.2f}]  +{(statistics.median(times[n]) - base) / (mb / disk):.2f} "
              "of the write's time")
    print(f"limit: {mb:.0f} MB a forward; device-to-host at pinned bandwidth ({d2h / 1e3:.1f} GB/s) "
          f"{mb / d2h * 1e3:.1f} ms, the disk's sustained write ({disk:.0f} MB/s) {mb / disk * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

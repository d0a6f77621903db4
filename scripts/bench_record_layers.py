"""What each layer of GPU recording adds to a forward, uninstrumented (inkling_model small bf16, 256
tokens, process writer): the model's probe calls into a recorder that does nothing ("sink noop"), the
recorder's per-probe path with nothing staged ("record() only"), plus one ``cudaMemcpyAsync`` a probe
into a device buffer and nothing else ("copies only"), the real batches, seals and hand-over with the
writer given nothing ("drain, no writer"), then the real writer process with ``durability=writer``
and with the default durability. Interleaved rounds of FW forwards (each recording run ends with its
steps on disk); medians, with the interquartile range of the rounds.

A developer's tool (it patches internals, like scripts/profile_record_cuda.py); needs a CUDA GPU.
Run: python3 scripts/bench_record_layers.py   (FW=4 forwards a round, ROUNDS=11)
"""
from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time

import torch

import profile_record_cuda as P  # this folder, on sys.path (it puts the checkout on sys.path)

import inkling_probe
from inkling_probe import sink
from inkling_probe.recorder import cudart
from bench_record import prune_finished_steps

FW = int(os.environ.get("FW", "4"))
ROUNDS = int(os.environ.get("ROUNDS", "11"))


class Noop:
    """A recorder that records nothing: what the model's probe calls cost by themselves."""

    def record(self, *a, **k):
        pass

    def next_step(self):
        pass


def copies_only(rec) -> None:
    """Each probe: one cudaMemcpyAsync into a 128 MB device buffer (wrapping), nothing else."""
    buf = torch.empty(1 << 26, device="cuda", dtype=torch.bfloat16)
    memcpy, base, cap, at = cudart._device_memcpy(), buf.data_ptr(), buf.numel() * 2, [0]
    raw = torch._C._cuda_getCurrentRawStream

    def staged(row, x):
        n = x.numel() * x.element_size()
        if at[0] + n > cap:
            at[0] = 0
        if x.is_contiguous():
            memcpy(base + at[0], x.data_ptr(), n, 3, raw(x.get_device()))
        at[0] += n
    rec._staged = staged


VARIANTS = {"record() only": ("writer", P.VARIANTS["record() only"][1]), "copies only": ("writer", copies_only),
            "drain, no writer": ("writer", P.VARIANTS["drain, no writer"][1]),
            "durability=writer": ("writer", None), "durability=disk": ("disk", None)}


def main() -> None:
    model, ids = P.cuda_small_model()
    root = tempfile.mkdtemp(prefix="record-layers-")
    recs, contexts = {"sink noop": Noop()}, []

    def run(name):
        rec = recs.get(name)
        sink._RECORDER = rec
        t0 = time.perf_counter()
        for _ in range(FW):
            model(ids)
        if rec is not None and not isinstance(rec, Noop):
            inkling_probe.step()
            if hasattr(rec._writer, "wait_for_ends"):
                rec._writer.wait_for_ends()
        torch.cuda.synchronize()
        sink._RECORDER = None
        elapsed = time.perf_counter() - t0
        prune_finished_steps(root)
        return elapsed

    with torch.no_grad():
        P.start_variants(VARIANTS, root, run, recs, contexts)
        order = ["plain", "sink noop", *VARIANTS]
        samples = {n: [] for n in order}
        rng = random.Random(0)
        for _ in range(ROUNDS):
            rng.shuffle(order)
            for n in order:
                samples[n].append(run(n) / FW)
    base = statistics.median(samples["plain"])
    print(f"ms a forward, {FW} forwards a round, {ROUNDS} rounds; over plain")
    for n in ["plain", "sink noop", *VARIANTS]:
        v = sorted(samples[n])
        m = statistics.median(v)
        print(f"{n:20s} {m * 1e3:6.1f} ms  {m / base:.3f}x  +{(m - base) * 1e3:5.1f} ms  "
              f"[{v[len(v) // 4] * 1e3:.1f}-{v[3 * len(v) // 4] * 1e3:.1f}]")
    for ctx, rec in contexts:
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

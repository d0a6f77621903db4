"""What arenas (store/arenas.py) save the recording thread, side by side in one process: transformers'
Inkling small fp32 on the CPU (256 tokens, bench_record.py's shape), ``record(model)`` outputs only
with the inline writer, rounds alternating arenas on and off (off: the plan never offers one, so
every large tensor gets a dataset of its own, as before arenas). Per forward of steps 1-3 (step 0
has no plan and is not timed): wall time, the writer's ``add`` (everything the writer does), its
jobs (hash, statistics, write: what the floor pays too) and the writer's own work outside them,
medians of rounds, and the datasets a step makes.

Wall times on a shared machine spread widely; the writer's own work is timed around its calls, so
it shows what arenas save even where the wall time cannot.
Run: python scripts/bench_arenas.py [--rounds 5] [--shape small]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import h5py
import torch

from bench_record import SHAPES  # this folder, on sys.path; puts the checkout on sys.path
from profile_record_cuda import CALLS, timed  # tag -> [calls, wall ns, CPU ns]; importable without a GPU

import inkling_probe
from inkling_probe.store import arenas, jobs, writer

def datasets(root: str, step: int) -> int:
    """Tensor datasets (own and packs) the dump's step ``step`` made."""
    n = 0
    for name in os.listdir(root):
        if name.endswith(".h5"):
            with h5py.File(os.path.join(root, name), "r") as f:
                for group in ("tensors", "packs"):
                    if f"{group}/{step}" in f:
                        n += len(f[f"{group}/{step}"])
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shape", default="small", choices=sorted(SHAPES))
    args = ap.parse_args()
    from transformers import InklingForCausalLM, InklingTextConfig

    torch.set_num_threads(1)
    kwargs, seq = SHAPES[args.shape]
    torch.manual_seed(0)
    model = InklingForCausalLM(InklingTextConfig(**kwargs)).eval()
    ids = torch.randint(0, kwargs["vocab_size"], (1, seq))
    timed(writer.SegmentWriter, "add", "add")
    timed(jobs._Jobs, "submit", "jobs")
    plan = arenas.ArenaPlan.capacity
    never = lambda self, step, kind, nbytes: (self._at(step), 0)[1]  # noqa: E731 (no arena offered)
    out: dict = {}
    made: dict = {}
    with torch.no_grad():
        model(ids)
        for _ in range(args.rounds):
            for label in ("arenas", "datasets of their own"):
                arenas.ArenaPlan.capacity = plan if label == "arenas" else never
                root = tempfile.mkdtemp(prefix="bench-arenas-")
                with inkling_probe.recording(root, writer="inline"), inkling_probe.record(model, inputs=False):
                    inkling_probe.step()
                    model(ids)
                    inkling_probe.step()
                    CALLS.clear()
                    t0 = time.perf_counter()
                    for _ in range(3):
                        model(ids)
                        inkling_probe.step()
                    wall = (time.perf_counter() - t0) / 3
                made[label] = datasets(root, 2)
                shutil.rmtree(root)
                for tag, value in (("wall", wall * 1e9), *((t, c[1]) for t, c in CALLS.items())):
                    out.setdefault(label, {}).setdefault(tag, []).append(value / (1 if tag == "wall" else 3))
    arenas.ArenaPlan.capacity = plan
    print(f"bench_arenas: transformers' Inkling {args.shape} fp32, {seq} tokens, CPU ({len(os.sched_getaffinity(0))} "
          f"cores, torch threads 1), record(model) outputs only, inline writer; {args.rounds} rounds alternating; "
          "ms a forward, medians")
    own = {}
    for label, spent in out.items():
        med = {k: statistics.median(v) / 1e6 for k, v in spent.items()}
        own[label] = [(a - b) / 1e6 for a, b in zip(spent["add"], spent["jobs"])]
        print(f"  {label:22s} wall {med['wall']:7.1f} | writer add {med['add']:6.1f} | jobs (hash, stats, write) "
              f"{med['jobs']:6.1f} | writer's own work {statistics.median(own[label]):5.1f} | "
              f"datasets a step {made[label]}")
    a, b = statistics.median(own["arenas"]), statistics.median(own["datasets of their own"])
    print(f"  writer's own work, arenas / datasets of their own: {a / b:.2f} ({b - a:.1f} ms a forward less)")


if __name__ == "__main__":
    sys.exit(main())

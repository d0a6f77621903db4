"""The writer process's share of a recorded GPU step, measured on the CPU (no GPU needed).

A GPU step of inkling_model small bf16 (256 tokens) is fed to a real writer process the way GPU
staging feeds it: float32 and bf16 tensors in batches laid out as StepBatch lays them out (each
tensor at a multiple of 4096 values) and placed in the writer's shared ring, their statistics given
(the GPU computes them), the logits a batch of their own, int64 tensors through the pipe. The
batches are sent spread over ``--forward-ms`` (the plain forward's time on the H200 bench), the
logits last, then the step's end waits for its segment to be on disk, as ``step()`` does with the
default durability. Printed per variant: the step's time, its tail (from the last tensor handed over
to the segment renamed: what ``step()`` waits for), and the writer process's CPU, beside the
disk's sustained write for the step's bytes (the limit).

Variants: ``packed`` (the default: a batch's tensors packed into 4 MiB parts, one dataset a part;
with 2+ writer threads the step's large writes spread over two segment files, store/writer.py's
lanes), ``packed, 1 lane`` (``INKLING_PROBE_WRITER_LANES=1``: one file a step, as before lanes) and
``dataset per tensor`` (``INKLING_PROBE_PACK_KB=0``: what each tensor of 256 KiB or more got before
the parts).

Run: .venv/bin/python scripts/bench_record_writer.py [--steps 12] [--forward-ms 40]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

ROW, CAPACITY = 1 << 12, 8 << 20  # step_batch.ROW and StepBatch's capacity (values)


def probe_list() -> list:
    """(name, shape, dtype) of every probe of one inkling_model small bf16 forward, 256 tokens (a
    CPU forward of the model with seeded random weights)."""
    import torch

    from inkling_probe import sink

    from bench_record import import_model_from_checkout  # scripts/, on sys.path

    import_model_from_checkout()
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM

    out = []

    class Names:
        def record(self, name, t, **kw):
            out.append((name, tuple(t.shape), str(t.dtype).removeprefix("torch.")))

        def next_step(self):
            pass
    torch.manual_seed(0)
    model = InklingForCausalLM(InklingConfig.preset("small"), dtype=torch.bfloat16).eval()
    previous, sink._RECORDER = sink._RECORDER, Names()
    try:
        with torch.no_grad():
            model(torch.randint(0, model.config.vocab_size, (256,)))
    finally:
        sink._RECORDER = previous
    return out


def _row(name, shape, dtype, step, seq) -> dict:
    from inkling_probe.store import schema

    return {"key": name, "step": step, "seq": seq, "call": 0, "rank": 0, "shape": schema.shape_text(shape),
            "dtype": dtype, "storage": "native", "shard": "replicated", "dim": -1, "token_dim": 0,
            "token_start": 0, "numel": math.prod(shape), "meta": ""}


def step_items(probes: list, step: int) -> list:
    """What the drain hands the writer in one step, in order: ('batch', dtype, rows, spans, used)
    as StepBatch seals them (one open batch a dtype, a tensor over half the capacity alone) and
    ('one', row, shape, dtype) for the rest."""
    items, open_ = [], {}

    def seal(b):
        if b["rows"]:
            items.append(("batch", b["dtype"], b["rows"], b["spans"], b["used"]))
    for seq, (name, shape, dtype) in enumerate(probes):
        n = math.prod(shape)
        if dtype in ("bfloat16", "float32") and 0 < n <= CAPACITY // 2:
            b = open_.get(dtype)
            if b is not None and b["used"] + n > CAPACITY:
                seal(b)
                b = None
            if b is None:
                b = open_[dtype] = {"dtype": dtype, "rows": [], "spans": [], "used": 0}
            b["spans"].append((b["used"], n, shape))
            b["rows"].append(_row(name, shape, dtype, step, seq))
            b["used"] = -(-(b["used"] + n) // ROW) * ROW
        elif dtype in ("bfloat16", "float32") and n <= CAPACITY:
            seal({"dtype": dtype, "rows": [_row(name, shape, dtype, step, seq)], "spans": [(0, n, shape)], "used": n})
        else:
            items.append(("one", _row(name, shape, dtype, step, seq), shape, dtype))
    for b in open_.values():
        seal(b)
    return items


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_variant(probes: list, steps: int, forward_s: float, pack_kb: float, folder: str,
                durability: str = "disk", lanes: int | None = None) -> dict:
    """Feed ``steps`` steps to a fresh writer process; per step (after two warm-up steps): time,
    tail, the writer's CPU seconds and the time spent waiting for ring space. ``durability``
    'writer': a step's end is not waited for (at most one in flight, as ``step()`` then does)."""
    from inkling_probe.store.writer_process import ProcessWriter

    rng = np.random.default_rng(0)
    os.makedirs(folder)
    w = ProcessWriter().open(folder, 0, 1, run_id="0123456789ab", pack_kb=pack_kb, lanes=lanes)
    ring = w.staging_ring()
    if ring is None:
        sys.exit("no shared ring (is /dev/shm available?)")
    w.claim_ring()
    source = {"bfloat16": rng.integers(0, 1 << 15, CAPACITY, dtype=np.uint16),
              "float32": rng.standard_normal(CAPACITY).astype(np.float32)}
    out = {"time": [], "tail": [], "cpu": [], "ring": []}
    waited = [0.0]

    def wait():
        t = time.perf_counter()
        w.wait_for_ring_space()
        waited[0] += time.perf_counter() - t
    for step in range(steps + 2):
        items = step_items(probes, step)
        gap = forward_s / len(items)
        cpu0, t0 = _cpu_seconds(w._proc.pid), time.perf_counter()
        waited[0] = 0.0
        for i, item in enumerate(items):
            while time.perf_counter() < t0 + i * gap:  # the forward producing the next batch
                time.sleep(min(1e-3, max(0.0, t0 + i * gap - time.perf_counter())))
            if item[0] == "one":
                _, row, shape, dtype = item
                w.add(row, np.arange(math.prod(shape), dtype=np.int64).reshape(shape))
                continue
            _, dtype, rows, spans, used = item
            data = source[dtype][:used]
            view = ring.slot(data.nbytes, wait).view(data.dtype)
            view[:] = data  # stands in for the device-to-host copy into the ring
            sums = np.zeros((len(rows), 5))
            sums[:, :3] = (1.0, 2.0, 3.0)
            w.add_batch(rows, view, spans, sums)
        last = time.perf_counter()
        w.end_segment(step, wait=durability == "disk")
        done = time.perf_counter()
        if step >= 2:
            out["time"].append(done - t0)
            out["tail"].append(done - last)
            out["cpu"].append(_cpu_seconds(w._proc.pid) - cpu0)
            out["ring"].append(waited[0])
    w.close(steps + 1)
    return out


def disk_rate(folder: str, total_mb: int = 512) -> float:
    """The folder's sustained write rate (MB/s): ``total_mb`` in 64 MB files, through the page cache."""
    chunk = memoryview(np.ones(16_000_000, np.float32)).cast("B")
    t0 = time.perf_counter()
    for i in range(total_mb // 64):
        with open(os.path.join(folder, f"disk{i}"), "wb") as f:
            f.write(chunk)
    rate = (total_mb // 64) * 64 / (time.perf_counter() - t0)
    for i in range(total_mb // 64):
        os.remove(os.path.join(folder, f"disk{i}"))
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--forward-ms", type=float, default=40.0, help="the batches are sent spread over this")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the dumps are written")
    ap.add_argument("--durability", choices=("disk", "writer"), default="disk",
                    help="writer: a step's end is not waited for (INKLING_PROBE_DURABILITY=writer)")
    args = ap.parse_args()
    probes = probe_list()
    mb = sum(math.prod(s) * (2 if d == "bfloat16" else 4 if d == "float32" else 8) for _, s, d in probes) / 1e6
    root = tempfile.mkdtemp(prefix="bench-writer-", dir=args.dir)
    try:
        disk = disk_rate(root)
        variants = {"packed": (256, None), "packed, 1 lane": (256, 1), "dataset per tensor": (0, None)}
        results = {}
        for round_ in range(2):  # two turns each, interleaved
            for label, (pack_kb, lanes) in variants.items():
                r = run_variant(probes, args.steps, args.forward_ms / 1e3, pack_kb,
                                os.path.join(root, f"{round_}-{pack_kb}-{lanes}"), args.durability, lanes)
                for k, v in r.items():
                    results.setdefault(label, {}).setdefault(k, []).extend(v)
    finally:
        shutil.rmtree(root)
    commit = os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()
    print(f"bench_record_writer at {commit} (durability={args.durability}): {len(probes)} probes, {mb:.0f} MB a step, "
          f"sent over {args.forward_ms:.0f} ms; "
          f"{2 * args.steps} steps a variant; medians")
    print(f"limit: the disk's sustained write ({disk:.0f} MB/s into {args.dir}) takes {mb / disk * 1e3:.1f} ms for a step")
    for label, r in results.items():
        med = {k: statistics.median(v) * 1e3 for k, v in r.items()}
        print(f"  {label:20s} step {med['time']:6.1f} ms, tail {med['tail']:6.1f} ms ({med['tail'] / (mb / disk * 1e3):.2f} "
              f"of the write's time), writer CPU {med['cpu']:6.1f} ms a step, waiting for ring space "
              f"{med['ring']:5.1f} ms a step")
    print(json.dumps({k: {m: [round(x * 1e3, 2) for x in v] for m, v in r.items()} for k, r in results.items()}))


if __name__ == "__main__":
    main()

"""Long runs: hundreds of decode steps recorded and compared; time per step by hundred (issues 26, 44).

Records ``--steps`` decode steps (``--keys`` probes a step, one token row ``[1, --width]`` each,
after a prefill step of ``--prompt`` tokens) twice, the candidate with 1e-3 relative noise, then
compares them. Prints, for recording and for compare, the mean time per step over each hundred
steps and the ratio last hundred / first hundred (flat: about 1), plus the segment count, the
open files of the process at the end, its RSS by hundred steps walked and its peak RSS.

``--generate``: a small transformers Llama (random weights, fp32) decodes ``--steps`` steps through
``generate()`` under ``record(model)``'s defaults (outputs and inputs, each tensor stored once: a
module input that is an earlier module's output is a reference); the same generate unrecorded runs
beside it, so the model's own growth (attention over a longer cache) is told from recording's. The
candidate (each weight x (1 + 1e-6 noise)) is teacher-forced to the reference's tokens.
``--cluster N``: each compare also on a local Dask cluster of N worker processes, as compare runs it (pairs
under cluster.MIN_PAIR_BYTES measured in the client) and with every pair sent to the cluster.

    .venv/bin/python scripts/bench_long.py [--steps 500] [--keys 40] [--width 256] [--jobs 1]
    .venv/bin/python scripts/bench_long.py --generate [--steps 500] [--jobs 2] [--cluster 2]
"""
from __future__ import annotations

import argparse
import contextlib
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


def tiny_llama(max_len: int, noise: float = 0.0):
    """transformers' Llama, 2 layers 64 wide, random weights (seeded); ``noise``: each weight x (1 + noise)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_len)
    model = LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for w in model.parameters():
            w.mul_(1 + noise * torch.randn(w.shape, generator=gen))
    return model


def generate(model, steps: int, prompt: int, path: str | None = None, forced: str | None = None):
    """Seconds per decode step of ``model.generate`` (``steps`` decode forwards after the prefill;
    a step: from one forward's start to the next's) and RSS (MB) at every hundredth forward; recorded
    with ``record(model)``'s defaults into ``path`` (None: unrecorded), teacher-forced to dump
    ``forced``'s tokens when given."""
    import torch

    import inkling_probe
    from inkling_probe.compare.force_tokens import force_tokens

    marks, rss = [], []

    def mark(module, args):
        if len(marks) % 100 == 0:
            rss.append(rss_now())
        marks.append(time.perf_counter())

    ids = (torch.arange(prompt) % 255 + 1)[None]  # [1, prompt]
    hook = model.register_forward_pre_hook(mark)  # before record's hooks: it runs first
    try:
        with torch.no_grad(), contextlib.ExitStack() as stack:
            if forced:
                stack.enter_context(force_tokens(model, forced))
            if path:
                stack.enter_context(inkling_probe.record(model, path))
            model.generate(ids, max_new_tokens=steps + 1, min_new_tokens=steps + 1, do_sample=False, pad_token_id=0)
            marks.append(time.perf_counter())
    finally:
        hook.remove()
    return [b - a for a, b in zip(marks[1:], marks[2:])], rss


def record_generate(ref: str, cand: str, steps: int, prompt: int) -> None:
    """The reference and the forced candidate recorded, each beside the same generate unrecorded."""
    import inkling_probe

    model, other = tiny_llama(prompt + steps + 2), tiny_llama(prompt + steps + 2, 1e-6)
    generate(model, 20, prompt)  # warm-up (transformers' first call)
    plain, _ = generate(model, steps, prompt)
    rec, rss = generate(model, steps, prompt, ref)
    plain2, _ = generate(other, steps, prompt, forced=ref)
    rec2, rss2 = generate(other, steps, prompt, cand, forced=ref)
    d = inkling_probe.open(ref)
    rows = [r for r in d.index if r["step"] >= 1]
    d.close()
    refs = sum(1 for r in rows if r.get("ref"))
    print(f"generate(): {steps} decode steps after a {prompt}-token prompt, record(model) defaults: "
          f"{len(rows) / steps:.0f} rows a decode step, {refs / steps:.0f} of them references to an earlier "
          "row (each tensor stored once)")
    for label, r, p in (("ref", rec, plain), ("cand", rec2, plain2)):
        show(f"unrecorded", p)
        show(f"recorded {label}", r)
        print(f"{'':12s} recorded / unrecorded by hundred: "
              + " | ".join(f"{a / b:.2f}" for a, b in zip(by_hundred(r), by_hundred(p)))
              + ("  (candidate: teacher-forced in both)" if label == "cand" else ""))
    print(f"record RSS (MB) at every hundredth forward: {' | '.join(map(str, rss))}; candidate "
          f"{' | '.join(map(str, rss2))}")


def compare_times(ref: str, cand: str, jobs: int, cluster=None) -> tuple[list[float], list[float], float, list]:
    """Wall and CPU (this thread's) seconds per step of compare's walk (from its progress
    callback), the whole call's wall time, and RSS (MB) as each hundredth step was reached."""
    from inkling_probe.compare import compare

    wall: dict[int, float] = {}
    cpu: dict[int, float] = {}
    rss: dict[int, int] = {}
    state = {"t": None, "c": None}
    order = _pair_steps(ref)

    def progress(done, total, key):
        now, now_c = time.perf_counter(), time.thread_time()
        step = next(order[key], -1)
        wall[step] = wall.get(step, 0.0) + (now - state["t"])
        cpu[step] = cpu.get(step, 0.0) + (now_c - state["c"])
        if step % 100 == 0:
            rss.setdefault(step, rss_now())
        state["t"], state["c"] = now, now_c

    t0 = state["t"] = time.perf_counter()
    state["c"] = time.thread_time()
    compare(ref, cand, explain=False, progress=progress, jobs=jobs, cluster=cluster)
    total = time.perf_counter() - t0
    return ([wall[s] for s in sorted(wall) if s >= 1], [cpu[s] for s in sorted(cpu) if s >= 1], total,
            [rss[s] for s in sorted(rss)])


def _pair_steps(ref: str) -> dict:
    """key -> an iterator over the steps of its rows in recorded order (compare walks a key's rows in
    that order; the progress callback names only the key)."""
    import inkling_probe

    d = inkling_probe.open(ref)
    steps: dict[str, list[int]] = {}
    for r in d.index:
        steps.setdefault(r["key"], []).append(int(r["step"]))
    d.close()
    return {k: iter(v) for k, v in steps.items()}


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


def rss_now() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


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
    ap.add_argument("--generate", action="store_true",
                    help="record a small transformers Llama's generate() with record(model) defaults instead")
    ap.add_argument("--cluster", type=int, default=0, help="also compare on a local Dask cluster of N workers")
    ap.add_argument("--keep", help="write the dumps here and keep them (reused when already there)")
    ap.add_argument("--repeats", type=int, default=3, help="compare runs over the same dumps (noise estimate)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    root = a.keep or tempfile.mkdtemp(prefix="bench-long-")
    ref, cand = os.path.join(root, "ref"), os.path.join(root, "cand")
    what = "generate" if a.generate else f"{a.keys}-{a.width}"
    marker = os.path.join(root, f"done-{a.steps}-{what}-{a.prompt}")
    try:
        if not os.path.exists(marker):
            for p in (ref, cand):
                shutil.rmtree(p, ignore_errors=True)
            if a.generate:
                record_generate(ref, cand, a.steps, a.prompt)
                t_ref = None
            else:
                t_ref = record(ref, a.steps, a.keys, a.width, a.prompt, 0.0)
                t_cand = record(cand, a.steps, a.keys, a.width, a.prompt, 1e-3)
            open(marker, "w").close()
        else:
            t_ref = None
            print("(dumps reused: recording not timed)")
        segs = len([f for f in os.listdir(ref) if f.endswith(".h5")])
        if not a.generate:
            print(f"{a.steps} decode steps x {a.keys} probes [1, {a.width}] fp32 (+ a {a.prompt}-token prefill); "
                  f"{segs} segment file(s) per dump")
        if t_ref:
            show("record", t_ref)
            show("record'", t_cand)
        t0 = time.perf_counter()
        import inkling_probe
        d = inkling_probe.open(ref)
        n = len(d.index)
        d.close()
        print(f"open + index of {n} rows ({segs} segment files): {time.perf_counter() - t0:.2f} s")
        with contextlib.ExitStack() as stack:
            from inkling_probe.compare import cluster as on_cluster

            modes = [(f"--jobs {a.jobs}", None, on_cluster.MIN_PAIR_BYTES)]
            if a.cluster:
                import logging

                import distributed

                lc = stack.enter_context(distributed.LocalCluster(
                    n_workers=a.cluster, threads_per_worker=1, processes=True, dashboard_address=None,
                    worker_dashboard_address=None, silence_logs=logging.CRITICAL))
                modes += [(f"--cluster ({a.cluster} workers)", lc.scheduler_address, on_cluster.MIN_PAIR_BYTES),
                          (f"--cluster ({a.cluster} workers), every pair sent", lc.scheduler_address, 0)]
            for label, cluster, min_pair in modes:
                walls, cpus = [], []
                on_cluster.MIN_PAIR_BYTES = min_pair  # 0: the cluster measures the small pairs too
                for i in range(a.repeats):
                    wall, cpu, total, rss = compare_times(ref, cand, a.jobs, cluster)
                    walls.append(wall)
                    cpus.append(cpu)
                    show(f"compare #{i + 1}", wall)
                    show(f"  CPU #{i + 1}", cpu)
                    print(f"  total {total:.2f} s ({label}); {n / total:.0f} rows/s; RSS (MB) by hundred steps: "
                          + " | ".join(map(str, rss)), flush=True)
                flat_claim("compare", walls)
                flat_claim("compare CPU", cpus)
        print(f"open files now {len(os.listdir('/proc/self/fd'))}; peak RSS {rss_peak()} MB "
              "(CPU: the walking thread's own time, which other jobs on the machine disturb less than wall time)")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

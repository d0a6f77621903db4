"""CUDA-graph decode with in-graph recording, measured side by side in one run (docs/GRAPHS.md).

1. replay time of the decode graph with full per-layer recording (every probe point copied into the
   static arena) vs the same graph captured with recording off (target <= 1.25x);
2. drain throughput (the arena's async device-to-host copy into pinned memory after a replay) vs
   pinned device-to-host bandwidth measured now: the same bytes in one plain copy, and 256 MiB
   (target >= half); also the whole step (replay + drain + hand-over to the writer), for honesty.

Needs a CUDA GPU. Run: python scripts/bench_graph.py [--preset small] [--batch 32] [--repeats 200]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "model"))

import inkling_probe  # noqa: E402
from inkling_model.runtime.runtime import Runtime  # noqa: E402


def gpu_ms(fn, repeats: int) -> list[float]:
    """Per-call GPU times (ms) of ``fn`` measured with CUDA events."""
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def captured(model, batch: int, prompts):
    rt = Runtime(model, max_batch=batch, max_len=128, cuda_graph=True, batch_sizes=(batch,))
    slots, logits = rt.prefill(prompts)
    runner = rt.capture()
    runner.inputs.fill(logits.argmax(-1).tolist(), slots, [len(p) for p in prompts], batch)
    return rt, runner


def pinned_gbps(nbytes: int, repeats: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    ms = statistics.median(gpu_ms(lambda: dst.copy_(src, non_blocking=True), repeats))
    return nbytes / ms / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    from graph_util import tiny_model

    model = tiny_model(torch.bfloat16, "cuda", preset=args.preset)
    prompts = [[(7 * r + i) % 1000 + 1 for i in range(12)] for r in range(args.batch)]
    with torch.no_grad():
        _, off = captured(model, args.batch, prompts)
        with tempfile.TemporaryDirectory() as d, inkling_probe.recording(d + "/dump", writer="process"):
            _, on = captured(model, args.batch, prompts)
            rec, layout = on.recording, on.recording.layout(args.batch)
            g_off, g_on = off.graphs[args.batch], on.graphs[args.batch]
            t_off, t_on = [], []
            for _ in range(args.repeats // 20):  # interleaved rounds
                t_off += gpu_ms(g_off.replay, 20)
                t_on += gpu_ms(g_on.replay, 20)

            def drain():
                rec.after_replay(args.batch)
                rec.drain._pending = None  # measure the copy only: no hand-over

            t_drain = gpu_ms(drain, args.repeats)

            def step():
                inkling_probe.step()
                g_on.replay()
                rec.after_replay(args.batch)
                rec.hand_over()

            t_step = gpu_ms(step, max(args.repeats // 10, 5))
    used = layout.used
    off_ms, on_ms = statistics.median(t_off), statistics.median(t_on)
    drain_gbps = used / statistics.median(t_drain) / 1e6
    same, big = pinned_gbps(used, args.repeats), pinned_gbps(256 * 2**20, 20)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; preset {args.preset} bf16, decode batch "
          f"{args.batch}, {len(layout.slots)} in-graph probes, arena {used / 2**20:.2f} MiB per step")
    print(f"replay: recording off {off_ms * 1e3:.1f} us, full recording {on_ms * 1e3:.1f} us "
          f"-> {on_ms / off_ms:.3f}x (target <= 1.25x)")
    print(f"drain (arena D2H into pinned, async): {drain_gbps:.1f} GB/s; pinned D2H now: same bytes {same:.1f} GB/s, "
          f"256 MiB {big:.1f} GB/s -> {drain_gbps / big:.2f} of pinned bandwidth (target >= 0.5)")
    print(f"whole recorded step (replay + drain + hand-over to the writer process): "
          f"{statistics.median(t_step):.2f} ms")


if __name__ == "__main__":
    main()

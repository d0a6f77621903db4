#!/usr/bin/env python
"""What recording costs a torch.compile'd model: a tiny transformers Llama, four ways, in one run.

    python scripts/bench_compile.py [--device cuda|cpu] [--backend B] [--mode M] [--rounds N] [--iters K]

Interleaved rounds (each round times every variant once, K forwards each, so drift of a shared
machine falls on all of them): eager unrecorded, compiled unrecorded, compiled recorded (probes
inside the compiled graph, inkling_probe.record around the compiled model; under --mode
reduce-overhead the forwards timed are CUDA graph replays, each drained into the dump) and eager recorded, each on
its own copy of the model (the two recorded copies hooked for the whole run, all into one scratch
dump, deleted after: a record() entered per round would recompile the compiled model each time, as
its hooks are new objects). The timed rounds' compiles are counted and printed (should be 0). Prints the device, each
variant's median seconds per forward and the ratios side by side. Compiles (and the first recorded
forward) are warm-up, not timed. Default: CUDA if available with Inductor, else the CPU with
aot_eager (Inductor's C++ compile takes minutes on a small CPU box; --backend inductor for it).
Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("eager", "compiled", "compiled+rec", "eager+rec")
GRAPH_MODES = ("reduce-overhead", "max-autotune")  # CUDA graphs: warm-up, capture, then replays are timed
BACKENDS = ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")


def build(device: str, layers: int, hidden: int, dtype):
    """A random tiny transformers Llama on ``device``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
                      num_attention_heads=max(1, hidden // 32), num_key_value_heads=max(1, hidden // 64),
                      max_position_embeddings=1024)
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--backend", default=None, help=f"one of {', '.join(BACKENDS)} (default: inductor on CUDA, "
                                                    "aot_eager on the CPU)")
    p.add_argument("--mode", default=None, help="torch.compile mode (Inductor's), e.g. max-autotune-no-cudagraphs")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=5, help="forwards per variant per round")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    a = p.parse_args(argv)

    import torch

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = a.backend or ("inductor" if device == "cuda" else "aot_eager")
    problems = [
        device not in ("cpu", "cuda") and f"--device {device}: cpu or cuda",
        device == "cuda" and not torch.cuda.is_available() and "--device cuda: no CUDA device here",
        backend not in BACKENDS and f"--backend {backend}: expected one of {', '.join(BACKENDS)}",
        a.mode is not None and backend != "inductor" and f"--mode {a.mode}: a mode is Inductor's",
        a.mode in GRAPH_MODES and device != "cuda" and f"--mode {a.mode}: CUDA graphs need --device cuda",
        min(a.rounds, a.iters, a.layers, a.hidden, a.seq) < 1 and "--rounds/--iters/--layers/--hidden/--seq: >= 1",
    ]
    bad = next((x for x in problems if x), None)
    if bad:
        print(f"Error: {bad}", file=sys.stderr)
        return 2

    import inkling_probe

    import contextlib
    import copy
    import shutil

    from inkling_probe.compiled.watch import watch

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    base = build(device, a.layers, a.hidden, dtype)
    # one copy per variant: a record() entered again builds new hooks, which recompiles the compiled
    # model on each entry (dynamo guards on the hooks), so the two recorded copies stay hooked throughout
    models = {v: copy.deepcopy(base) for v in VARIANTS}
    runs = {v: torch.compile(m, backend=backend, mode=a.mode) if v.startswith("compiled") else m
            for v, m in models.items()}
    ids = torch.randint(0, 512, (1, a.seq), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    scratch = Path(tempfile.mkdtemp(prefix="bench_compile_"))
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(inkling_probe.recording(scratch / "dump"))
        for v in ("compiled+rec", "eager+rec"):
            stack.enter_context(inkling_probe.record(runs[v]))  # the compiled module: its replays are drained
        graphs = a.mode in GRAPH_MODES
        step = torch.compiler.cudagraph_mark_step_begin if graphs else (lambda: None)
        t0 = time.perf_counter()
        for v in VARIANTS:  # warm-up: the compiles (probes off, and with the hooks); with CUDA graphs also
            for _ in range(3 if graphs else 1):  # the graph's warm-up call and its capture
                step()
                runs[v](ids)
        sync()
        print(f"warm-up (compiles) {time.perf_counter() - t0:.1f} s", flush=True)
        with watch() as counts:
            for _ in range(a.rounds):
                for v in VARIANTS:
                    sync()
                    t = time.perf_counter()
                    for _ in range(a.iters):
                        step()
                        runs[v](ids)
                    sync()
                    times[v].append((time.perf_counter() - t) / a.iters)
    from inkling_probe.store.reader import as_dump

    rows = as_dump(scratch / "dump").index
    replayed = sum((r.get("meta") or {}).get("cudagraph") == 1 for r in rows)
    shutil.rmtree(scratch, ignore_errors=True)
    name = torch.cuda.get_device_name() if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    med = {v: statistics.median(ts) for v, ts in times.items()}
    print(f"device: {name}; torch {torch.__version__}; backend={backend} mode={a.mode}; Llama {a.layers} layers, "
          f"hidden {a.hidden}, seq {a.seq}, {a.dtype}; {a.rounds} rounds x {a.iters} forwards")
    print(f"timed rounds: {counts.summary()}, {counts.cudagraph_skips} CUDA graph skip(s); rows recorded "
          f"{len(rows)}, {replayed} of them drained from CUDA graph replays")
    print("  ".join(f"{v}: {med[v] * 1e3:.2f} ms" for v in VARIANTS))
    print(f"compiled/eager {med['compiled'] / med['eager']:.2f}  "
          f"compiled+rec/compiled {med['compiled+rec'] / med['compiled']:.2f}  "
          f"eager+rec/eager {med['eager+rec'] / med['eager']:.2f}  "
          f"compiled+rec/eager+rec {med['compiled+rec'] / med['eager+rec']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

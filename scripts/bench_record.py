"""record() against torch.save from forward hooks, side by side in one run (issue 9; figures in docs/PERFORMANCE.md).

The anchors' protocol (reference/MEASURED.md, "Peers"): transformers' Inkling with random weights,
fp32, every module output recorded, torch threads 1; overhead = the recording run / the plain run,
medians of interleaved runs. One run is ``--steps`` forwards in a row (a step each) and, for
recording, the wait until the last step is on disk: a writer slower than the model shows, and no
run's writing spills into the next one's time. Each (shape, cores) cell runs in its own process pinned to
that many cores (the writer process inherits the pinning), so "1 core" means the writer competes
with the model. Two floors: the bytes' own cost alone (hashed, summarised and written in a loop,
:func:`floor`) and the same work done from forward hooks in the same rounds
(:func:`floor_in_forward_run`: what the simplest recorder, with no rows, datasets or index, pays in
a forward). Also measured: the writer's start cost in the recording process, and the start-up
of the torch-free read commands (`ls`, `show`) against `python -c "import h5py, numpy"`.

Run:  .venv/bin/python scripts/bench_record.py [--shapes tiny,small,1gb] [--cores 1,2] [--repeats 7]
GPU:  python scripts/bench_record.py --cuda   (inkling_model small, bf16, eager: recorded / plain; then
      transformers' Inkling small bf16, 256 tokens: record(model) defaults, outputs only, torch.save hooks)
      python scripts/bench_record.py --peers-only [--cuda]   (only the latter; without --cuda tiny fp32 on the CPU)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = {  # MEASURED.md's peer table: tiny = hidden 128, 6 layers, 8 experts, seq 64; small = 512, 8, 16, 256
    "tiny": (dict(vocab_size=512, hidden_size=128, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, swa_num_attention_heads=4, swa_num_key_value_heads=2,
                  swa_head_dim=32, intermediate_size=256, moe_intermediate_size=64, n_routed_experts=8,
                  num_experts_per_tok=2, n_shared_experts=2, sliding_window_size=16, rel_extent=32), 64),
    "small": (dict(vocab_size=2048, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=64, swa_num_attention_heads=8, swa_num_key_value_heads=4,
                   swa_head_dim=64, intermediate_size=1024, moe_intermediate_size=256, n_routed_experts=16,
                   num_experts_per_tok=4, n_shared_experts=2, sliding_window_size=64, rel_extent=128), 256),
}
SHAPES["1gb"] = (SHAPES["small"][0], 2560)  # issue 26: small's model on 10x the tokens: 2.4 GB of outputs a forward (fp32)


def stored_mb(d, step: int) -> float:
    """MB of tensor values one step stores: bf16 2 bytes a value (as itself; 4 in schema 2), the
    8-bit floats 2 (upcast to float16), everything else its dtype's size; a reference row (each tensor
    stored once a step) stores none."""
    import numpy as np

    def size(r):
        if r["dtype"] == "bfloat16":
            return 4 if r["storage"] == "upcast" else 2
        if r["dtype"].startswith("float8"):
            return 4 if r["dtype"] == "float8_e8m0fnu" else 2
        return 1 if r["dtype"].startswith("float4") else np.dtype(r["dtype"].replace("bool", "bool_")).itemsize
    return sum(r["numel"] * size(r) for r in d.index if r["step"] == step and not r.get("ref")) / 1e6


def interleaved(fns: dict, repeats: int, cpu: dict | None = None, after=None) -> dict:
    """All samples (seconds) of each callable, run in shuffled turns ``repeats`` times after a warm-up.
    With ``cpu`` (a dict), the CPU seconds of each run (:func:`cpu_seconds`) go into ``cpu[name]``;
    ``after()``, untimed, follows every run (the cells free the disk there)."""
    after = after or (lambda: None)
    for f in fns.values():
        f()
        after()
    times = {k: [] for k in fns}
    if cpu is not None:
        cpu.update({k: [] for k in fns})
    order, rng = list(fns), random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for k in order:
            c0 = cpu_seconds() if cpu is not None else 0.0
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
            if cpu is not None:
                cpu[k].append(cpu_seconds() - c0)
            after()
    return times


def prune(root: str) -> None:
    """Free the disk between timed runs (a 1 GB forward writes 2.5 GB a run): torch.save's folders
    but the latest, and every finished segment of the recordings but those of step 0 (the warm-up's
    first forward, counted at the end). Keeping the first four segments instead kept 10 GB a writer
    at 1gb (a step spans three 1 GB segments), 20 GB of a 24 GB machine's memory where the temp dir
    is a tmpfs. Nothing a writer holds open is touched."""
    folders = sorted((e for e in os.scandir(root) if e.name.startswith("pt-")), key=lambda e: int(e.name[3:]))
    for e in folders[:-1]:
        shutil.rmtree(e.path)
    for e in os.scandir(root):
        if e.name.startswith("fl-"):  # floor_in_forward_run's files
            os.remove(e.path)
    from inkling_probe.store import schema
    from inkling_probe.store.segments import read_segment

    for writer in ("inline", "process", "default", "default-once_off"):
        folder = os.path.join(root, writer)
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            path = os.path.join(folder, name)
            if not schema.parse_segment_name(name) or name.endswith(schema.TMP_SUFFIX) or path in _FIRST_STEP:
                continue
            rows = read_segment(path)[1]
            if rows and min(r["step"] for r in rows) > 0:
                os.remove(path)
            else:
                _FIRST_STEP.add(path)


_FIRST_STEP: set = set()  # segments that hold step 0 (kept; their index is not read again)


def prune_finished_steps(root: str, keep: int = 6) -> None:
    """(GPU bench, untimed, between runs) Delete each recording's finished segments past its first
    ``keep`` (one or two segment files a step here, store/writer.py's lanes: the first three steps
    stay for the report). A run writes ~160 MB
    and the bench ~5 GB: left in the page cache, the dirty pages grew past the kernel's background
    threshold on an H200 host and its writeback slowed the later runs (the default durability read
    1.76x in an A/B run that kept them and 1.43x in the next one, which pruned). A recording's open
    segment is a .tmp file and is not touched."""
    from inkling_probe.store import schema

    for folder in os.scandir(root):
        if folder.is_dir():
            names = sorted(n for n in os.listdir(folder.path) if schema.SEGMENT_RE.match(n))
            for name in names[keep:]:
                os.remove(os.path.join(folder.path, name))


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its live child processes (the writer
    process): on a shared machine other jobs inflate wall times far more than CPU times."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    total = usage.ru_utime + usage.ru_stime
    try:
        children = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
    except OSError:
        children = []
    for pid in children:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass  # a child that ended meanwhile
    return total


# -- one cell, in a pinned child process ----------------------------------------------------------
def torch_save_hooks(model, folder):
    """The peer: torch.save of every module output, one file per tensor (SGLang dumper style)."""
    import torch

    from inkling_probe.hooks import flatten

    def hook_for(path):
        def hook(module, args, output):
            for key, t in flatten(output, path):
                torch.save(t.detach(), os.path.join(folder["now"], f"{key or 'output'}.pt"))
        return hook
    return [m.register_forward_hook(hook_for(p)) for p, m in model.named_modules()]


def torch_save_run(model, ids, root: str, steps: int, sync=lambda: None):
    """(run, folder): a run of ``steps`` forwards with :func:`torch_save_hooks`, each forward into a new
    ``pt-N`` folder under ``root``; ``folder["now"]`` is the latest."""
    counter, folder = {"n": 0}, {"now": root}

    def run():
        handles = torch_save_hooks(model, folder)
        try:
            for _ in range(steps):
                counter["n"] += 1
                folder["now"] = os.path.join(root, f"pt-{counter['n']}")
                os.makedirs(folder["now"])
                model(ids)
            sync()
        finally:
            for h in handles:
                h.remove()
    return run, folder


def cell(shape: str, repeats: int, steps: int) -> dict:
    import torch
    from transformers import InklingForCausalLM, InklingTextConfig

    import inkling_probe
    from inkling_probe import sink
    from inkling_probe.recorder.recorder import writer_mode

    torch.set_num_threads(1)
    kwargs, seq = SHAPES[shape]
    torch.manual_seed(0)
    model = InklingForCausalLM(InklingTextConfig(**kwargs)).eval()
    ids = torch.randint(0, kwargs["vocab_size"], (1, seq))
    root = tempfile.mkdtemp(prefix="bench-record-")
    def plain():
        for _ in range(steps):
            model(ids)
    fns = {"plain": plain}
    recorders = {}
    auto = writer_mode("auto")
    variants = {"inline": dict(writer="inline"), "process": dict(writer="process"),  # outputs only
                "default": dict(writer=auto), "default, once off": dict(writer=auto, once=False)}  # inputs too
    for label, options in variants.items():
        rec_ctx = inkling_probe.recording(os.path.join(root, label.replace(", ", "-").replace(" ", "_")), **options)
        recorders[label] = (rec_ctx, rec_ctx.__enter__())
        sink._RECORDER = None
    hooks = {}

    def recorded(writer):
        def run():
            ctx, rec = recorders[writer]
            sink._RECORDER = rec
            with inkling_probe.record(model, inputs=writer.startswith("default")):
                for _ in range(steps):
                    inkling_probe.step()  # waits for the previous step's segment: part of the cost
                    model(ids)
            inkling_probe.step()  # the last step on disk
            sink._RECORDER = None
        return run

    saved, folder = torch_save_run(model, ids, root, steps)
    fns.update({"record inline": recorded("inline"), "record process": recorded("process"),
                "record default": recorded("default"), "record default, once off": recorded("default, once off"),
                "torch.save hooks": saved, "floor in the forward": floor_in_forward_run(model, ids, root, steps)})
    cpu: dict = {}
    with torch.no_grad():
        times = interleaved(fns, repeats, cpu, after=lambda: prune(root))
    hooks["files"] = len(os.listdir(folder["now"]))
    for ctx, rec in recorders.values():
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    d = inkling_probe.open(os.path.join(root, "inline"))
    first = min(r["step"] for r in d.index)  # the warm-up's first forward (with --steps 1 every other step is empty)
    mb = stored_mb(d, step=first)
    tensors = sum(1 for r in d.index if r["step"] == first)
    inputs_mb = {label: stored_mb(inkling_probe.open(os.path.join(root, folder)), step=first)
                 for label, folder in (("default", "default"), ("default, once off", "default-once_off"))}
    shutil.rmtree(root)
    with torch.no_grad():
        work = floor(model, ids, repeats)
    return {"times": times, "cpu": cpu, "mb": mb, "tensors": tensors, "files": hooks["files"],
            "auto": auto, "steps": steps, "floor": work, "inputs_mb": inputs_mb}


def floor_in_forward_run(model, ids, root: str, steps: int):
    """A run of ``steps`` forwards that does the floor's work where a recorder has to do it: forward
    hooks on every module hash, summarise and write each output (each tensor once a forward, as
    ``record()`` stores it: recorder/once.py's ``Seen`` decides, as in the recorder), chunk by chunk as
    the writer does (stats.hash_and_stats with a ``pwrite`` a chunk), into one ``fl-N`` file a forward
    under ``root``; no rows, datasets, index or steps. What :func:`floor` leaves out: the model's own
    slow-down from the forward's bytes (90 MB at small) streamed through the cache between its ops,
    and the hooks' dispatch. Every recorder on one core pays those too."""
    from inkling_probe.hooks import flatten
    from inkling_probe.recorder.once import Seen
    from inkling_probe.store.stats import hash_and_stats

    state = {"n": 0, "fd": -1, "at": 0}
    seen = Seen()

    def hook(module, args, output):
        fd = state["fd"]
        for _, t in flatten(output, ""):
            if seen.earlier(t, {"step": state["n"], "numel": t.numel(), "key": "", "call": 0}) is not None:
                continue
            array = t.detach().contiguous().numpy()
            at = state["at"]
            hash_and_stats(array, array.dtype.name, "native", True,
                           lambda view, offset: os.pwrite(fd, view, at + offset))
            state["at"] += array.nbytes

    def run():
        handles = [m.register_forward_hook(hook) for m in model.modules()]
        try:
            for _ in range(steps):
                state["n"] += 1
                state["fd"] = os.open(os.path.join(root, f"fl-{state['n']}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                state["at"] = 0
                try:
                    model(ids)
                finally:
                    os.close(state["fd"])
        finally:
            for h in handles:
                h.remove()
    return run


def floor(model, ids, repeats: int) -> float:
    """Seconds a forward's bytes cost the recorder at the least: every module output of one forward
    (made contiguous beforehand) hashed and summarised (stats.hash_and_stats) and written into one
    fresh file in the temp dir; no hooks, rows, datasets or index. Median of ``repeats``. torch.save
    writes the same bytes, and neither hashes nor summarises them."""
    from inkling_probe.hooks import flatten
    from inkling_probe.store.stats import hash_and_stats

    arrays = []  # the fp32 model's outputs: float32 and int64 (numpy takes both)
    handles = [m.register_forward_hook(lambda m, a, o: arrays.extend(t.contiguous().numpy().copy()
                                                                        for _, t in flatten(o, "")))
               for m in model.modules()]
    try:
        model(ids)
    finally:
        for h in handles:
            h.remove()
    root = tempfile.mkdtemp(prefix="bench-floor-")
    samples = []
    for i in range(repeats + 1):
        path = os.path.join(root, str(i))
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        at = 0
        for a in arrays:
            hash_and_stats(a, a.dtype.name, "native", True)
            if a.size:
                os.pwrite(fd, memoryview(a).cast("B"), at)
            at += a.nbytes
        os.close(fd)
        samples.append(time.perf_counter() - t0)
        os.remove(path)
    shutil.rmtree(root)
    return statistics.median(samples[1:])


def writer_start(repeats: int) -> dict:
    """The writer's cost in the recording process: Popen and ring set-up, and a one-shot dump."""
    import torch

    import inkling_probe
    from inkling_probe.store.writer_process import ProcessWriter

    root = tempfile.mkdtemp(prefix="bench-start-")
    spawn = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        w = ProcessWriter()
        spawn.append(time.perf_counter() - t0)
        w.close(-1)
    x = torch.randn(64, 128)
    oneshot = {}
    for label, early in (("at first probe", False), ("0.5 s earlier (INKLING_PROBE at import)", True)):
        samples = []
        for i in range(repeats):
            path = os.path.join(root, f"{i}-{early}")
            with inkling_probe.recording(path, writer="process"):
                if early:
                    time.sleep(0.5)  # the model loading while the writer starts
                t0 = time.perf_counter()
                for k in range(50):
                    inkling_probe.probe(f"t{k}", x)
                inkling_probe.step()  # the one step is on disk when this returns
                samples.append(time.perf_counter() - t0)
        oneshot[label] = statistics.median(samples)
    shutil.rmtree(root)
    return {"spawn": statistics.median(spawn), "oneshot": oneshot}


def child_main(args) -> None:
    os.sched_setaffinity(0, set(json.loads(args.child_cpus)))
    out = {"cells": {s: cell(s, args.repeats, args.steps) for s in args.shapes.split(",")}}
    if args.start:
        out["start"] = writer_start(5)
    print("RESULT " + json.dumps(out))


# -- the parent: cells, read start-up, report ------------------------------------------------------
def run_child(cpus: list[int], shapes: str, repeats: int, steps: int, start: bool) -> dict:
    argv = [sys.executable, os.path.abspath(__file__), "--child-cpus", json.dumps(cpus), "--shapes", shapes,
            "--repeats", str(repeats), "--steps", str(steps)] + (["--start"] if start else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_PROBE")}
    out = subprocess.run(argv, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"})
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"bench child failed:\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def read_startup(repeats: int) -> dict:
    """Wall time of `ls` and `show` on a small dump vs `python -c "import h5py, numpy"`."""
    import torch

    import inkling_probe

    root = tempfile.mkdtemp(prefix="bench-read-")
    path = os.path.join(root, "d")
    with inkling_probe.recording(path, writer="inline"):
        for i in range(50):
            inkling_probe.probe(f"layers.{i}.out", torch.randn(64, 128))
    cmds = {"import h5py, numpy": [sys.executable, "-c", "import h5py, numpy"],
            "inkling-probe ls": [sys.executable, "-m", "inkling_probe.cli", "ls", path],
            "inkling-probe show": [sys.executable, "-m", "inkling_probe.cli", "show", path, "layers.3.out"],
            "import torch": [sys.executable, "-c", "import torch"]}
    env = {**os.environ, "PYTHONPATH": ROOT}

    def runner(cmd):
        return lambda: subprocess.run(cmd, capture_output=True, env=env, check=True)
    times = interleaved({k: runner(c) for k, c in cmds.items()}, repeats)
    shutil.rmtree(root)
    return {k: statistics.median(v) for k, v in times.items()}


def disk_rate(total_mb: int = 1024) -> float:
    """Sustained write rate (MB/s) of the temp dir's disk: ``total_mb`` in 100 MB files, one thread,
    through the page cache as the recorder writes. Recording at a rate near it is bound by it."""
    import numpy as np

    root = tempfile.mkdtemp(prefix="bench-disk-")
    chunk = memoryview(np.ones(25_000_000, np.float32)).cast("B")
    t0 = time.perf_counter()
    for i in range(total_mb // 100):
        with open(os.path.join(root, f"f{i}"), "wb") as f:
            f.write(chunk)
    rate = (total_mb // 100) * 100 / (time.perf_counter() - t0)
    shutil.rmtree(root)
    return rate


def _spread(samples: list[float], base: list[float]) -> str:
    """Median ratio and the interquartile range of per-round ratios."""
    ratios = sorted(s / b for s, b in zip(samples, base))
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else [ratios[0], 0, ratios[-1]]
    return f"{statistics.median(samples) / statistics.median(base):.2f}x [{q[0]:.2f}-{q[2]:.2f}]"


def report(results: dict, startup: dict | None) -> None:
    for cores, res in results.items():
        for shape, c in res["cells"].items():
            t = c["times"]
            plain = t["plain"]
            print(f"{shape:5s} {cores} core{'s' if cores > 1 else ' '} plain {statistics.median(plain) / c['steps'] * 1e3:7.1f} ms | "
                  f"torch.save hooks {_spread(t['torch.save hooks'], plain)} | record inline "
                  f"{_spread(t['record inline'], plain)} | record process {_spread(t['record process'], plain)} | "
                  f"auto = {c['auto']} | {c['tensors']} tensors, {c['mb']:.1f} MB/forward, {c['files']} .pt files")
            if c.get("cpu"):  # CPU seconds, writer process included: less swayed by other jobs
                u, base = c["cpu"], statistics.median(c["cpu"]["plain"])
                lead = {w: statistics.median(u["torch.save hooks"]) / statistics.median(u[f"record {w}"])
                        for w in ("inline", "process")}
                print(f"{'':13s} CPU time: torch.save hooks {statistics.median(u['torch.save hooks']) / base:.2f}x | "
                      f"record inline {statistics.median(u['record inline']) / base:.2f}x | record process "
                      f"{statistics.median(u['record process']) / base:.2f}x | torch.save / record: inline "
                      f"{lead['inline']:.2f}, process {lead['process']:.2f}")
            if "record default" in t:  # issue 44: inputs too, each tensor stored once vs stored again
                out = statistics.median(t["record inline" if c["auto"] == "inline" else "record process"])
                default = statistics.median(t["record default"])
                mbs = c["inputs_mb"]
                print(f"{'':13s} record(model) default (outputs and inputs, {c['auto']} writer): "
                      f"{_spread(t['record default'], plain)}, once off {_spread(t['record default, once off'], plain)} | "
                      f"default / outputs only: {default / out:.2f}, once off "
                      f"{statistics.median(t['record default, once off']) / out:.2f} | torch.save hooks / default: "
                      f"{statistics.median(t['torch.save hooks']) / default:.2f} | MB/forward stored: outputs "
                      f"{c['mb']:.2f}, default {mbs['default']:.2f}, once off {mbs['default, once off']:.2f}")
            wall = {w: statistics.median(t["torch.save hooks"]) / statistics.median(t[f"record {w}"])
                    for w in ("inline", "process")}
            print(f"{'':13s} wall: torch.save / record: inline {wall['inline']:.2f}, process {wall['process']:.2f} "
                  "(target >= 1.3 for the auto writer)")
            if "floor" in c:  # the bytes' own cost: the best lead a recorder that hashes and summarises can have
                per = statistics.median(plain) / c["steps"]
                best = statistics.median(t["torch.save hooks"]) / c["steps"] / (per + c["floor"])
                auto = statistics.median(t[f"record {c['auto']}"]) / c["steps"]
                print(f"{'':13s} floor: hashing, summarising and writing a forward's tensors, no hooks, rows or "
                      f"datasets: {c['floor'] * 1e3:.1f} ms = {(per + c['floor']) / per:.2f}x of plain: torch.save / "
                      f"record can be at most {best:.2f}; record ({c['auto']}) / (plain + floor) "
                      f"{auto / (per + c['floor']):.2f} (issue 44: <= 1.1 at small and 1gb)")
                inside = statistics.median(t["floor in the forward"]) / c["steps"]  # in the same rounds
                print(f"{'':13s} floor in the forward (the same hashing, summarising and writing from forward "
                      f"hooks, each tensor once, nothing else): {_spread(t['floor in the forward'], plain)}; "
                      f"record ({c['auto']}) / floor in the forward {auto / inside:.2f} (<= 1.1 asked of the "
                      f"floor); torch.save hooks / floor in the forward "
                      f"{statistics.median(t['torch.save hooks']) / c['steps'] / inside:.2f}")
        if "start" in res:
            s = res["start"]
            print(f"writer start ({cores} core{'s' if cores > 1 else ''}): spawn in the recording process "
                  f"{s['spawn'] * 1e3:.1f} ms; one-shot dump of 50 tensors (probes + step()): " +
                  ", ".join(f"writer started {k}: {v * 1e3:.0f} ms" for k, v in s["oneshot"].items()))
    if startup:
        base = startup["import h5py, numpy"]
        print("read start-up (wall, median): " + ", ".join(
            f"{k} {v:.2f} s" + (f" (+{v - base:.2f} s)" if k != "import h5py, numpy" else "")
            for k, v in startup.items()))


# -- CUDA: inkling_model small bf16, eager -------------------------------------------------------
def import_model_from_checkout() -> None:
    """Make ``inkling_model`` importable from this checkout's model/ when it is not installed."""
    import importlib.util

    if "inkling_model" not in sys.modules and importlib.util.find_spec("inkling_model") is None:
        spec = importlib.util.spec_from_file_location("inkling_model", os.path.join(ROOT, "model", "__init__.py"),
                                                      submodule_search_locations=[os.path.join(ROOT, "model")])
        module = importlib.util.module_from_spec(spec)
        sys.modules["inkling_model"] = module
        spec.loader.exec_module(module)


def cuda_small_model():
    """(inkling_model small in bf16 on the GPU with seeded random weights, 256 token ids): the GPU
    benches' model (also scripts/bench_record_parts.py); imports the model from this checkout when
    it is not installed."""
    import torch

    import_model_from_checkout()
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM

    torch.manual_seed(0)
    model = InklingForCausalLM(InklingConfig.preset("small"), dtype=torch.bfloat16).cuda().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02) if p.is_floating_point() else None
    return model, torch.randint(0, model.config.vocab_size, (256,), device="cuda")


TARGETS = {"inline": "", "process": "  (target <= 1.5x)", "process, durability=writer": "  (target <= 1.3x)"}


def cuda_main(repeats: int, steps: int, disk: float, lanes: tuple = ()) -> None:
    import torch

    import inkling_probe

    model, ids = cuda_small_model()
    root = tempfile.mkdtemp(prefix="bench-cuda-")

    def plain():
        for _ in range(steps):
            model(ids)
        torch.cuda.synchronize()

    variants = {"inline": dict(writer="inline"), "process": dict(writer="process"),
                "process, durability=writer": dict(writer="process", durability="writer")}
    for n in lanes:  # the writer's step over n segment files (1: as before lanes), in the same rounds
        variants.update({f"process, {n} lane{'s' * (n > 1)}": dict(writer="process", writer_lanes=n),
                         f"process, durability=writer, {n} lane{'s' * (n > 1)}": dict(
                             writer="process", durability="writer", writer_lanes=n)})
    recs = {}
    for label, options in variants.items():
        ctx = inkling_probe.recording(os.path.join(root, label.replace(" ", "_").replace(",", "")), **options)
        recs[label] = (ctx, ctx.__enter__())
        inkling_probe.sink._RECORDER = None

    waits = {label: [] for label in recs}  # per run: seconds spent in step() waiting for the disk
    ring_waits = {label: [] for label in recs}  # per run: seconds the forward waited for ring space
    from inkling_probe.store.writer_process import ProcessWriter
    wait_for_ring = ProcessWriter.wait_for_ring_space
    now = [None]

    def timed_ring_wait(self):
        t0 = time.perf_counter()
        try:
            wait_for_ring(self)
        finally:
            if now[0] is not None:
                ring_waits[now[0]][-1] += time.perf_counter() - t0
    ProcessWriter.wait_for_ring_space = timed_ring_wait

    def recorded(label):
        rec = recs[label][1]
        next_step = rec.next_step

        def timed_step():
            t0 = time.perf_counter()
            next_step()
            waits[label][-1] += time.perf_counter() - t0

        def run():
            inkling_probe.sink._RECORDER = rec
            waits[label].append(0.0)
            ring_waits[label].append(0.0)
            now[0] = label
            rec.next_step = timed_step
            for _ in range(steps):
                model(ids)  # calls step(), which waits for the previous step to be on disk
            inkling_probe.step()  # the last step on disk (durability=writer: with the writer)
            if hasattr(rec._writer, "wait_for_ends"):
                rec._writer.wait_for_ends()  # every run ends with its steps on disk
            torch.cuda.synchronize()
            del rec.next_step
            now[0] = None
            inkling_probe.sink._RECORDER = None
        return run
    with torch.no_grad():
        t = interleaved({"plain": plain, **{label: recorded(label) for label in recs}}, repeats,
                        after=lambda: prune_finished_steps(root))
    for ctx, rec in recs.values():
        inkling_probe.sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    d = inkling_probe.open(os.path.join(root, "process"))
    n = sum(1 for r in d.index if r["step"] == 1)
    shutil.rmtree(root)
    mb = stored_mb(d, step=1)
    last = max((r for r in d.index if r["step"] == 1), key=lambda r: r["seq"])  # the logits
    tail_mb = last["numel"] * (2 if last["dtype"] == "bfloat16" else 4) / 1e6
    print(f"GPU {torch.cuda.get_device_name()} inkling_model small bf16 eager, 256 tokens, {n} probes, {mb:.0f} MB "
          f"stored/forward, {steps} forwards a run: plain {statistics.median(t['plain']) / steps * 1e3:.1f} ms/forward")
    for label in recs:
        print(f"  recorded {label}: {_spread(t[label], t['plain'])}{TARGETS.get(label, '')}")
    per_forward = {w: statistics.median(ws[1:]) / steps * 1e3 for w, ws in waits.items()}  # [0]: warm-up
    print("of which waiting in step() (for the step to be on disk; with durability=writer, the one before): "
          + ", ".join(f"{w} {ms:.1f} ms/forward" for w, ms in per_forward.items()))
    print("and waiting in the forward for space in the writer's shared ring (the writer behind): "
          + ", ".join(f"{w} {statistics.median(ws[1:]) / steps * 1e3:.1f} ms/forward" for w, ws in ring_waits.items()))
    plain_ms = statistics.median(t["plain"]) / steps * 1e3
    limit_lines(mb, disk, d2h_rate(), plain_ms,
                {label: (statistics.median(t[label]) / steps * 1e3, per_forward[label]) for label in recs}, tail_mb)
    with torch.no_grad():
        loaded = plain_beside_load(plain, mb / plain_ms * 1e3, repeats)
        cold = plain_beside_load(plain, mb / plain_ms * 1e3, repeats, source_mb=_COLD_SOURCE_MB)
    print(f"  the host's share: plain with another process hashing and writing {mb:.0f} MB a plain forward "
          f"beside it (the writer's host work, nothing shared with the model): {loaded}; "
          f"reading from {_COLD_SOURCE_MB} MB of memory in turn (out of the caches, as the writer reads "
          f"a ring the GPU has just filled) {cold}")


# -- transformers' Inkling through record(model): what users meet (issue 44) ----------------------
def peers_model(cuda: bool):
    """(transformers' Inkling, [1, T] token ids) of the peer protocol, seeded: small in bf16 on 256
    tokens on the GPU; without ``cuda`` tiny in fp32 on the CPU (its own length)."""
    import torch
    from transformers import InklingForCausalLM, InklingTextConfig

    kwargs, seq = SHAPES["small" if cuda else "tiny"]
    seq = 256 if cuda else seq
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    torch.manual_seed(0)
    model = InklingForCausalLM(InklingTextConfig(**kwargs)).to(device=device, dtype=dtype).eval()
    return model, torch.randint(0, kwargs["vocab_size"], (1, seq), device=device)


def peers_main(cuda: bool, repeats: int, steps: int) -> None:
    """transformers' Inkling, every module, ``steps`` forwards a run, interleaved: ``record(model)``
    with its defaults (outputs and inputs, each tensor stored once), the same with INKLING_PROBE_ONCE=0,
    outputs only, and torch.save hooks (one file per tensor, the tensor as the hook gets it). GPU:
    small in bf16 on 256 tokens; without ``cuda``: tiny in fp32 on the CPU, a smoke test."""
    import torch

    import inkling_probe
    from inkling_probe import sink

    model, ids = peers_model(cuda)
    shape, seq, dtype = "small" if cuda else "tiny", ids.shape[1], model.dtype
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    root = tempfile.mkdtemp(prefix="bench-peers-")
    variants = {"record(model) default": dict(inputs=True), "record(model) default, once off": dict(inputs=True, once=False),
                "record(model) outputs only": dict(inputs=False)}
    recs = {}
    for label, options in variants.items():
        settings = {k: v for k, v in options.items() if k != "inputs"}
        ctx = inkling_probe.recording(os.path.join(root, str(len(recs))), **settings)
        recs[label] = (ctx, ctx.__enter__(), options["inputs"])
        sink._RECORDER = None

    def plain():
        for _ in range(steps):
            model(ids)
        sync()

    def recorded(label):
        _, rec, inputs = recs[label]

        def run():
            sink._RECORDER = rec
            with inkling_probe.record(model, inputs=inputs):
                for _ in range(steps):
                    inkling_probe.step()
                    model(ids)
            inkling_probe.step()  # the last step on disk
            sync()
            sink._RECORDER = None
        return run

    saved, folder = torch_save_run(model, ids, root, steps, sync)

    def tidy():
        prune_finished_steps(root)
        for e in sorted((e for e in os.scandir(root) if e.name.startswith("pt-")), key=lambda e: int(e.name[3:]))[:-1]:
            shutil.rmtree(e.path)
    with torch.no_grad():
        t = interleaved({"plain": plain, **{label: recorded(label) for label in recs},
                         "torch.save hooks": saved}, repeats, after=tidy)
    files = len(os.listdir(folder["now"]))
    pt_mb = sum(e.stat().st_size for e in os.scandir(folder["now"])) / 1e6
    stored = {}
    for label, (ctx, rec, _) in recs.items():
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
        d = inkling_probe.open(os.path.join(root, str(list(recs).index(label))))
        stored[label] = (stored_mb(d, step=1), sum(1 for r in d.index if r["step"] == 1),
                         sum(1 for r in d.index if r["step"] == 1 and r.get("ref")))
    shutil.rmtree(root)
    name = torch.cuda.get_device_name() if cuda else f"CPU ({len(os.sched_getaffinity(0))} cores, torch threads "\
        f"{torch.get_num_threads()})"
    plain_ms = statistics.median(t["plain"]) / steps * 1e3
    print(f"{name}: transformers' Inkling {shape} {str(dtype).removeprefix('torch.')}, {seq} tokens, every module, "
          f"{steps} forwards a run, {repeats} interleaved rounds: plain {plain_ms:.1f} ms/forward; "
          f"torch.save hooks write {files} files, {pt_mb:.1f} MB a forward")
    for label in (*recs, "torch.save hooks"):
        extra = "" if label not in stored else (f"  ({stored[label][0]:.1f} MB stored/forward, {stored[label][1]} rows, "
                                                f"{stored[label][2]} references)")
        print(f"  {label}: {_spread(t[label], t['plain'])}{extra}")
    med = {k: statistics.median(v) for k, v in t.items()}
    print(f"  default / outputs only {med['record(model) default'] / med['record(model) outputs only']:.2f} "
          f"(once off {med['record(model) default, once off'] / med['record(model) outputs only']:.2f}; target <= 1.3); "
          f"torch.save hooks / default {med['torch.save hooks'] / med['record(model) default']:.2f} (target >= 2.5 on a GPU)")


def plain_beside_load(plain, rate_mb_s: float, repeats: int, source_mb: int = 4) -> str:
    """Plain forwards alone and with a separate process hashing (XXH3) and writing to the temp dir
    ``rate_mb_s`` MB a second (a forward's bytes per plain forward: more than the writer's rate,
    which a slower recorded forward paces), 4 MB at a time, into a new 52 MB file every 52 MB: the
    writer process's host work, sharing nothing with the model. How much of the writer's cost is the
    host's (caches, memory bandwidth, clocks) rather than the recording process's. Interleaved.
    ``source_mb``: the chunks come from that much memory in turn (4: one chunk, which stays in the
    caches; hundreds: each chunk read from memory, as the writer reads its ring)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    go, stop, idle = ctx.Event(), ctx.Event(), ctx.Event()
    folder = tempfile.mkdtemp(prefix="bench-load-")
    loader = ctx.Process(target=host_load, args=(go, stop, idle, rate_mb_s, folder, source_mb), daemon=True)
    loader.start()

    def loaded():
        idle.clear()
        go.set()  # the loader wakes at once (it waits on this event)
        try:
            plain()
        finally:
            go.clear()
    try:
        t = interleaved({"plain": plain, "loaded": loaded}, repeats,
                        after=lambda: idle.wait(5))  # untimed: the loader's last chunk is done
    finally:
        stop.set()
        go.set()
        loader.join(10)
        shutil.rmtree(folder, ignore_errors=True)
    return _spread(t["loaded"], t["plain"]) + " of plain alone"


_LOAD_FILE_BYTES = 13 * (4 << 20)  # 52 MB: about a GPU forward's 54
_COLD_SOURCE_MB = 512  # past any last-level cache of these hosts


def host_load(go, stop, idle, rate_mb_s: float, folder: str, source_mb: int = 4) -> None:
    """(The loader process of :func:`plain_beside_load`: works while ``go`` is set, then sets ``idle``.)"""
    import numpy as np
    import xxhash

    source = np.random.default_rng(0).integers(0, 255, max(source_mb, 4) << 20, dtype=np.uint8)
    chunks = [source[i:i + (4 << 20)] for i in range(0, source.nbytes, 4 << 20)]
    files, written = [], 0
    idle.set()
    while not stop.is_set():
        if not go.wait(0.05):
            idle.set()
            continue
        t0, sent = time.perf_counter(), 0
        while go.is_set() and not stop.is_set():
            if written % _LOAD_FILE_BYTES == 0:  # a new file, as the writer starts a segment a step
                files.append(os.open(os.path.join(folder, f"seg{len(files)}"), os.O_CREAT | os.O_WRONLY, 0o600))
                if len(files) > 3:
                    os.close(files[-4])
                    os.unlink(os.path.join(folder, f"seg{len(files) - 4}"))
            chunk = chunks[(written >> 22) % len(chunks)]
            xxhash.xxh3_64(chunk).intdigest()
            os.pwrite(files[-1], chunk, written % _LOAD_FILE_BYTES)
            written += chunk.nbytes
            sent += chunk.nbytes
            ahead = sent / 1e6 / rate_mb_s - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)


def d2h_rate(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Device-to-host copy bandwidth into pinned memory (MB/s), the best of ``repeats`` copies."""
    import torch

    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    best = float("inf")
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        host.copy_(dev, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del dev, host
    return nbytes / best / 1e6


def limit_lines(mb: float, disk: float, d2h: float, plain_ms: float, recorded: dict, tail_mb: float = 0.0) -> None:
    """The physical limit beside the figures: a forward's bytes moved at the pinned D2H bandwidth
    and written at the disk's sustained rate (both measured in this run), and each variant's time
    over plain, split into step()'s wait and the rest, as fractions of the disk's time.

    The floors: with ``durability=writer`` the writing overlaps the next forward, so only the copy
    to the host must fit in a forward (plain + D2H, as long as the disk keeps up: write <= plain);
    with the default durability ``step()`` waits for the step's last bytes, so the floor is plain +
    D2H + the write of what arrives last (the logits, ``tail_mb``), the rest overlapping the forward;
    plain + the whole write is what overlapping nothing would cost."""
    disk_ms, d2h_ms = mb / disk * 1e3, mb / d2h * 1e3
    tail_ms = tail_mb / disk * 1e3
    print(f"limit: a forward stores {mb:.0f} MB: device-to-host at pinned bandwidth ({d2h / 1e3:.1f} GB/s) "
          f"{d2h_ms:.1f} ms, written at the disk's sustained rate ({disk:.0f} MB/s) {disk_ms:.1f} ms "
          f"({'keeps up with' if disk_ms <= plain_ms else 'slower than'} the plain forward, {plain_ms:.1f} ms)")
    print(f"  floors: durability=writer plain + D2H = {(plain_ms + d2h_ms) / plain_ms:.2f}x"
          f"{'' if disk_ms <= plain_ms else f' (the disk: {disk_ms / plain_ms:.2f}x)'}; default durability "
          f"plain + D2H + writing the last {tail_mb:.0f} MB (the logits) = {(plain_ms + d2h_ms + tail_ms) / plain_ms:.2f}x; "
          f"overlapping nothing {(plain_ms + disk_ms) / plain_ms:.2f}x")
    for label, (ms, wait) in recorded.items():
        extra = ms - plain_ms
        print(f"  {label}: +{extra:.1f} ms a forward = {extra / disk_ms:.2f} of the write's time: "
              f"waiting in step() {wait:.1f} ms ({wait / disk_ms:.2f}), in the forward {extra - wait:.1f} ms "
              f"({(extra - wait) / disk_ms:.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="tiny,small")
    ap.add_argument("--cores", default="1,2", help="cells pinned to this many cores (comma-separated)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="forwards (steps) in one timed run")
    ap.add_argument("--cuda", action="store_true", help="GPU: inkling_model small bf16, recorded / plain; then "
                    "transformers' Inkling small bf16 through record(model) (defaults, outputs only) and torch.save hooks")
    ap.add_argument("--peers-only", action="store_true",
                    help="only the transformers' Inkling part (with --cuda: on the GPU; without: tiny fp32 on this "
                         "CPU, a smoke test)")
    ap.add_argument("--no-startup", action="store_true", help="skip the read start-up measurement")
    ap.add_argument("--lanes", default="",
                    help="with --cuda: also the process writer with its step's large writes over these numbers "
                         "of segment files (comma-separated; 1: one file a step, as before lanes)")
    ap.add_argument("--child-cpus", help=argparse.SUPPRESS)
    ap.add_argument("--start", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_cpus:
        return child_main(args)
    if args.peers_only:
        return peers_main(args.cuda, args.repeats, args.steps)
    if args.cuda:
        disk = disk_rate()
        print(f"disk: {disk:.0f} MB/s sustained write into {tempfile.gettempdir()} (1 GB, 100 MB files)")
        cuda_main(args.repeats, args.steps, disk, tuple(int(n) for n in args.lanes.split(",") if n))
        return peers_main(True, args.repeats, args.steps)
    available = sorted(os.sched_getaffinity(0))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    import torch
    print(f"disk: {disk_rate():.0f} MB/s sustained write into {tempfile.gettempdir()} (1 GB, 100 MB files)")
    print(f"bench_record at {commit}: torch {torch.__version__}, {len(available)} cores available, "
          f"torch threads 1, {args.repeats} interleaved rounds of {args.steps} forwards (recording: until the last "
          "step is on disk); ratio = median [interquartile range of rounds]")
    for n in (int(c) for c in args.cores.split(",")):
        if n > len(available):
            print(f"({n} cores requested, {len(available)} available: skipped)")
            continue
        report({n: run_child(available[:n], args.shapes, args.repeats, args.steps, start=True)}, None)
        sys.stdout.flush()
    if not args.no_startup:
        report({}, read_startup(args.repeats))


if __name__ == "__main__":
    main()

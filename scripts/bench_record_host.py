"""record(model)'s host cost a forward on the CPU: the default (module outputs and inputs, each tensor
stored once) against outputs only (issue 44), the recording thread's per-module and per-row work alone.

One forward of transformers' Inkling (fp32, torch threads 1) runs under ``record(model)`` in each mode
while its hook calls are logged; then those calls are replayed without the model, with the recorder's
hand-over stubbed (its host writer's ``write`` and the writer's ``add_ref``). What is measured is what the hooks,
``Recorder.record`` and the reference check cost before anything reaches a writer or a drain: the host
work that a launch-bound GPU forward pays for each module call and each row. The copies, the staging
and the writing are not in it (scripts/bench_record.py measures everything end to end). The modes run in
interleaved rounds, timed as thread CPU time; the figures are medians with the interquartile range of
the rounds, given in ms a forward and in us for each row and each hook call that the default adds.

``--against REV`` measures a copy of commit REV (git archive into a temp dir) the same way, in processes
alternating with this checkout's, so before and after come out side by side. ``--instructions`` counts
instructions under valgrind's callgrind instead of timing (deterministic: on a loaded machine the time
is noisy and the count is not; a few minutes a process).

A developer's tool (it patches internals). Run: python3 scripts/bench_record_host.py [--shape tiny]
[--against main] [--runs 2] [--instructions]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_record import ROOT, SHAPES  # this folder, on sys.path

MODES = {"default": True, "outputs only": False}  # record(model, inputs=...)


# -- the child: one checkout's figures ------------------------------------------------------------
def logged_forward(model, ids, inputs: bool, path: str):
    """(recorder, [(hook, args)] of one forward, rows, references) for ``record(model, inputs=inputs)``;
    the recorder stays open, its hand-over stubbed."""
    import torch

    import inkling_probe
    from inkling_probe import hooks, sink

    log, refs = [], []

    def logging(make):
        def factory(self, path):
            hook = make(self, path)

            def spy(*a):
                log.append((hook, a))
                return hook(*a)
            return spy
        return factory

    ctx = inkling_probe.recording(path, writer="inline")
    rec = ctx.__enter__()
    if hasattr(rec, "_host_writer"):
        rec._host_writer.write = lambda *a: None
    else:  # a commit before the write path's one interface (issue 44 item 2)
        rec._write = lambda *a: None
    referenced = rec._referenced

    def counted(row, t) -> bool:
        found = referenced(row, t)
        refs.extend([1] if found else [])
        return found
    rec._referenced = counted
    made = hooks._Capture.pre_hook, hooks._Capture.post_hook
    hooks._Capture.pre_hook, hooks._Capture.post_hook = logging(made[0]), logging(made[1])
    try:
        with torch.no_grad(), inkling_probe.record(model, inputs=inputs):
            model(ids)
            rec._writer.add_ref = lambda row: None
    finally:
        hooks._Capture.pre_hook, hooks._Capture.post_hook = made
        del rec._referenced
        sink._RECORDER = None
    return (ctx, rec), log, rec._seq, len(refs)


def replay(rec, log) -> None:
    """One forward's hook calls again, as a step of ``rec``."""
    import inkling_probe
    from inkling_probe import sink

    sink._RECORDER = rec
    inkling_probe.step()
    for hook, a in log:
        hook(*a)
    sink._RECORDER = None


def callgrind_dump(tag: str) -> None:
    """End callgrind's current part here (the count since the last dump goes to a file named by ``tag``)."""
    p = subprocess.Popen(["callgrind_control", "-d", tag, str(os.getpid())], stdout=subprocess.DEVNULL)
    while p.poll() is None:
        time.sleep(0.01)


def child(args) -> None:
    sys.path.insert(0, args.child)  # the checkout measured (bench_record put this one on sys.path)
    import torch
    from transformers import InklingForCausalLM, InklingTextConfig

    import inkling_probe
    from inkling_probe import sink

    assert inkling_probe.__file__.startswith(os.path.abspath(args.child)), inkling_probe.__file__
    torch.set_num_threads(1)
    kwargs, seq = SHAPES[args.shape]
    torch.manual_seed(0)
    model = InklingForCausalLM(InklingTextConfig(**kwargs)).eval()
    ids = torch.randint(0, kwargs["vocab_size"], (1, seq))
    root = tempfile.mkdtemp(prefix="bench-host-")
    made = {m: logged_forward(model, ids, inputs, os.path.join(root, m.replace(" ", "_"))) for m, inputs in MODES.items()}
    out = {m: {"hook_calls": len(log), "rows": rows, "refs": refs} for m, (_, log, rows, refs) in made.items()}
    runs = {m: (rec, log) for m, ((_, rec), log, _, _) in made.items()}
    with torch.no_grad():
        for rec, log in runs.values():
            for _ in range(3):
                replay(rec, log)
        (count if args.instructions else timed)(runs, args, out)
    for (ctx, rec), _, _, _ in made.values():
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    shutil.rmtree(root)
    print("RESULT " + json.dumps(out))


def count(runs: dict, args, out: dict) -> None:
    """Two callgrind parts a mode, ``args.forwards`` replays each (the parent reads the counts)."""
    callgrind_dump("setup")  # what came before (imports, the model, the logged forwards)
    callgrind_dump("null")  # a dump's own cost, taken off every part
    for r in range(2):
        for m, (rec, log) in runs.items():
            for _ in range(args.forwards):
                replay(rec, log)
            callgrind_dump(f"{m.replace(' ', '_')}-{r}")


def timed(runs: dict, args, out: dict) -> None:
    """``args.rounds`` interleaved rounds: each mode's thread CPU seconds a forward, into ``out``."""
    samples, order = {m: [] for m in runs}, list(runs)
    for _ in range(args.rounds):
        random.shuffle(order)
        for m in order:
            rec, log = runs[m]
            t0 = time.thread_time()
            for _ in range(args.forwards):
                replay(rec, log)
            samples[m].append((time.thread_time() - t0) / args.forwards)
    for m, s in samples.items():
        out[m]["seconds"] = s


# -- the parent: checkouts in alternating processes, the report -----------------------------------
def run_child(tree: str, args) -> dict:
    argv = [sys.executable, os.path.abspath(__file__), "--child", tree, "--shape", args.shape,
            "--rounds", str(args.rounds), "--forwards", str(args.forwards)] + (["--instructions"] if args.instructions else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_PROBE")}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    cg = tempfile.mkdtemp(prefix="bench-host-cg-")
    if args.instructions:
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}/out"] + argv
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"bench child ({tree}) failed:\n{done.stderr[-3000:]}")
    out = json.loads(line[len("RESULT "):])
    if args.instructions:
        counts = callgrind_parts(cg)
        for m in out:
            tag = m.replace(" ", "_")
            out[m]["instructions"] = [(counts[f"{tag}-{r}"] - counts["null"]) / args.forwards for r in range(2)]
    shutil.rmtree(cg)
    return out


def callgrind_parts(folder: str) -> dict:
    """Instructions of each dumped part, by its tag."""
    counts = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            text = f.read()
        tag = re.search(r"^desc: Trigger: dump (\S+)", text, re.M)
        if tag:
            counts[tag.group(1)] = int(re.search(r"^summary: (\d+)", text, re.M).group(1))
    return counts


def checkout(rev: str) -> str:
    """A temp dir holding commit ``rev`` of this repository (its tracked files)."""
    folder = tempfile.mkdtemp(prefix="bench-host-rev-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def figures(res: dict, instructions: bool) -> dict:
    """Per mode: a forward's cost (median), its spread, and the default's extra per row and per hook call."""
    unit = 1e-6 if instructions else 1e3  # M instructions, or ms
    key = "instructions" if instructions else "seconds"
    med = {m: statistics.median(res[m][key]) * unit for m in MODES}
    d, o = res["default"], res["outputs only"]
    extra = [(a - b) * unit for a, b in zip(d[key], o[key])]
    q = statistics.quantiles(extra, n=4) if len(extra) >= 4 else [min(extra), 0, max(extra)]
    return {"med": med, "extra": statistics.median(extra), "q": (q[0], q[2]),  # per row: us, or k instructions
            "per_row": statistics.median(extra) / (d["rows"] - o["rows"]) * 1e3,
            "per_call": statistics.median(extra) / (d["hook_calls"] - o["hook_calls"]) * 1e3,
            "ratio": med["default"] / med["outputs only"]}


def report(results: dict, instructions: bool) -> None:
    unit, small = ("M instructions", "k instructions") if instructions else ("ms", "us")
    first = next(iter(results.values()))[0]
    d, o = first["default"], first["outputs only"]
    print(f"a forward: default {d['hook_calls']} hook calls, {d['rows']} rows ({d['refs']} references); "
          f"outputs only {o['hook_calls']} hook calls, {o['rows']} rows ({o['refs']} references)")
    by_tree = {}
    for tree, runs in results.items():
        by_tree[tree] = [figures(r, instructions) for r in runs]
        for i, f in enumerate(by_tree[tree]):
            print(f"{tree} run {i + 1}: default {f['med']['default']:.3f} {unit} a forward, outputs only "
                  f"{f['med']['outputs only']:.3f}; default - outputs only {f['extra']:.3f} {unit} "
                  f"[{f['q'][0]:.3f}-{f['q'][1]:.3f}] = {f['per_row']:.2f} {small} an extra row, "
                  f"{f['per_call']:.2f} {small} an extra hook call; default / outputs only {f['ratio']:.2f}")
    if len(by_tree) == 2:
        (was, before), (now, after) = by_tree.items()
        print(f"{now} / {was}, run by run: default - outputs only "
              + ", ".join(f"{a['extra'] / b['extra']:.2f}" for a, b in zip(after, before))
              + "; default " + ", ".join(f"{a['med']['default'] / b['med']['default']:.2f}" for a, b in zip(after, before))
              + "; outputs only " + ", ".join(f"{a['med']['outputs only'] / b['med']['outputs only']:.2f}"
                                             for a, b in zip(after, before))
              + "; default / outputs only " + ", ".join(f"{b['ratio']:.2f} -> {a['ratio']:.2f}"
                                                       for a, b in zip(after, before)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--against", help="also measure this commit (e.g. main), in alternating processes")
    ap.add_argument("--runs", type=int, default=2, help="processes a checkout")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds a process (timing)")
    ap.add_argument("--forwards", type=int, default=10, help="replayed forwards a round")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind (valgrind)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    here = f"this checkout ({commit}{', modified' if _dirty() else ''})"
    trees = {here: ROOT}
    if args.against:
        trees = {args.against: checkout(args.against), **trees}
    print(f"bench_record_host: transformers' Inkling {args.shape} fp32, {len(os.sched_getaffinity(0))} cores "
          f"available, torch threads 1; {'instructions (callgrind)' if args.instructions else 'thread CPU time'}, "
          f"{args.forwards} replayed forwards a round, {args.rounds if not args.instructions else 2} rounds a process; "
          f"ratio = median [interquartile range of rounds]")
    results = {t: [] for t in trees}
    try:
        for _ in range(args.runs):
            for label, tree in trees.items():
                results[label].append(run_child(tree, args))
    finally:
        if args.against:
            shutil.rmtree(trees[args.against])
    report(results, args.instructions)


def _dirty() -> bool:
    return bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()

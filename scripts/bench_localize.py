"""Localization corpus: does compare name the op where a divergence is born, and nothing on benign pairs?

Planted faults with known culprit keys and benign pairs, on inkling_model (TP 1 and 2, bf16 and
NVFP4) and tiny random transformers models (Llama, Qwen2-MoE, GPT-NeoX), each compared in fp32
without a control and in bf16 with a control. Prints a table (case, regime, truth, culprit, first
divergence, explain verdict), then top-1 accuracy, explain accuracy, false positives and a
sensitivity sweep. Cases live in corpus/ (the package inkling_corpus, one module per family);
docs/COMPARE.md, "Localization corpus", says how they are judged.

    python scripts/bench_localize.py [--quick] [--only PATTERN] [--json OUT] [--keep DIR] [--no-sweep]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from inkling_corpus.bench import match as _match, run, select


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the subset the pytest runs (under a minute)")
    p.add_argument("--only", help="case names matching this glob (or containing this text)")
    p.add_argument("--json", help="write every result to this file")
    p.add_argument("--keep", help="record dumps here and keep them (default: a temp dir, removed)")
    p.add_argument("--families", default=None, help="comma-separated families (default: all)")
    p.add_argument("--no-sweep", action="store_true", help="skip the sensitivity sweep")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    import torch

    torch.set_num_threads(1)
    from inkling_corpus import families as fams, report, sweep
    from inkling_corpus.dumps import Dumps

    t0 = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)
    names = args.families.split(",") if args.families else fams.NAMES
    families = fams.load(names)
    cases = select(families, args.quick, args.only)
    sweep_cases = [] if args.no_sweep else [c for c in sweep.cases(families, args.quick) if _match(c.name, args.only)]
    with tempfile.TemporaryDirectory(prefix="bench_localize_") as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        dumps = Dumps(root, families, log)
        results = run(cases, dumps, log)
        sweep_results = run(sweep_cases, dumps, log) if sweep_cases else []
    print(report.table(results))
    print()
    print(report.summary(results))
    for line in sweep.smallest(sweep_results):
        print(line)
    print(f"\n{len(cases)} cases, {len(results)} comparisons, {len(sweep_results)} sweep comparisons, "
          f"{time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": [r.to_dict() for r in results],
                       "sweep": [r.to_dict() for r in sweep_results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

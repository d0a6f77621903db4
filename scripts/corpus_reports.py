"""Every compare report of the localization corpus, written to files: the check that a refactor of
compare/ is one (``diff -r`` of two runs' folders is empty).

Records the corpus's dumps once into ``--dumps`` (kept, reused by later runs), then compares every
case in every regime (and the sweep's) and writes, per comparison, ``<case>__<regime>.json`` (the
``compare --json`` document, keys sorted) and ``.txt`` (the terminal view, no colour, 160 columns).

    python scripts/corpus_reports.py --dumps /tmp/corpus_dumps --out /tmp/reports_before
    ... change compare/ ...
    python scripts/corpus_reports.py --dumps /tmp/corpus_dumps --out /tmp/reports_after
    diff -r /tmp/reports_before /tmp/reports_after
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dumps", required=True, help="folder of the corpus's dumps (recorded where missing)")
    p.add_argument("--out", required=True, help="folder for the reports (created; must not exist)")
    p.add_argument("--only", help="case names matching this glob (or containing this text)")
    p.add_argument("--quick", action="store_true", help="the quick subset only")
    p.add_argument("--families", default=None, help="comma-separated families (default: all)")
    return p.parse_args(argv)


def _terminal(rep) -> str:
    from rich.console import Console

    from inkling_probe.views import terminal

    buf = io.StringIO()
    terminal.render(Console(file=buf, width=160, no_color=True, force_terminal=False), rep, all_rows=True)
    return buf.getvalue()


def _report(case, regime: str, dumps) -> tuple[dict, str]:
    from inkling_corpus.judge import _batch_row
    from inkling_probe.compare import compare

    trio = case.regimes[regime]
    missing = [dumps.failed[r] for r in (trio.ref, trio.cand, trio.control) if r in dumps.failed]
    if missing:
        return {"error": f"record: {missing[0]}"}, ""
    ctl = dumps.path(trio.control) if trio.control else None
    try:
        rep = compare(dumps.path(trio.ref), dumps.path(trio.cand), control=ctl, jobs=1,
                      ref_row=_batch_row(trio.ref), cand_row=_batch_row(trio.cand))
    except Exception as e:  # the error is part of the answer compared
        return {"error": f"{type(e).__name__}: {e}"}, ""
    doc = json.loads(json.dumps(rep.to_dict(), default=str))
    for field in ("reference", "candidate", "control"):  # dump paths: the same dumps either way
        doc.pop(field, None)
    return doc, _terminal(rep)


def main(argv=None) -> int:
    args = _args(argv)
    os.environ["COLUMNS"] = "160"  # the terminal view's width, the same on every run
    import torch

    torch.set_num_threads(1)
    from inkling_corpus import families as fams, sweep
    from inkling_corpus.bench import match, select
    from inkling_corpus.dumps import Dumps

    t0 = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)
    families = fams.load(args.families.split(",") if args.families else fams.NAMES)
    cases = select(families, args.quick, args.only)
    cases += [c for c in sweep.cases(families, args.quick) if match(c.name, args.only)]
    os.makedirs(args.dumps, exist_ok=True)
    os.makedirs(args.out)
    dumps = Dumps(args.dumps, families, log)
    dumps.ensure([r for c in cases for t in c.regimes.values() for r in (t.ref, t.cand, t.control)])
    n = 0
    for c in cases:
        for regime in c.regimes:
            doc, text = _report(c, regime, dumps)
            stem = os.path.join(args.out, f"{c.name.replace('/', '--')}__{regime}")
            with open(stem + ".json", "w") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
            with open(stem + ".txt", "w") as f:
                f.write(text)
            n += 1
    log(f"{n} reports in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

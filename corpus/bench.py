"""Which corpus cases to run, and running them: record what they need, then compare and judge."""
from __future__ import annotations

import fnmatch


def match(name: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    return fnmatch.fnmatch(name, pattern) if any(c in pattern for c in "*?[") else pattern in name


def select(families: dict, quick: bool, only: str | None) -> list:
    """The corpus cases to run (not the sweep)."""
    cases = [c for f in families.values() for c in f.cases()]
    return [c for c in cases if (c.quick or not quick) and match(c.name, only)]


def run(cases, dumps, log) -> list:
    """Record what the cases need, then compare and judge every case in every regime."""
    from inkling_corpus.judge import run_case

    trios = [t for c in cases for t in c.regimes.values()]
    dumps.ensure([r for t in trios for r in (t.ref, t.cand, t.control)])
    results = []
    for c in cases:
        for regime in c.regimes:
            results.append(run_case(c, regime, dumps))
    log(f"compared {len(results)} case-regimes")
    return results

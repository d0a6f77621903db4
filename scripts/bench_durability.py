"""How often ``INKLING_PROBE_DURABILITY=writer`` loses the last completed step to a whole-group kill.

Runs the crash tests' child (tests/inkling_probe/store/test_crash.py: 20 tensors, ~0.4 MB a step, a
0.1 s pause inside each step), SIGKILLs its whole process group (recorder and writer process) after
step 3 began, and counts the runs whose last completed step (2) is missing from the dump. ``now``:
the kill comes right as ``step()`` returns (a watchdog, a crash at the start of the next forward);
``random``: at a uniformly random moment within the step.

    python scripts/bench_durability.py [--trials 10]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "inkling_probe", "store"),
                os.path.join(HERE, "..", "tests", "inkling_probe")]


def trials(mode: str, n: int, step_s: float = 0.1) -> int:
    import inkling_probe
    import test_crash as tc

    rng, lost = random.Random(0), 0
    for _ in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "d")
            delay = 0.0 if mode == "now" else rng.uniform(0.0, step_s)
            last = tc.run_and_kill(path, "process", at=("done", 3), whole_group=True, handshake=False,
                                   pause=step_s, delay=delay, env={"INKLING_PROBE_DURABILITY": "writer"})
            lost += (last - 1) not in inkling_probe.open(path).steps(tc.NAMES[0])
    return lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    n = ap.parse_args().trials
    for mode in ("now", "random"):
        print(f"kill {mode:6s}: lost the last completed step in {trials(mode, n)} of {n}", flush=True)


if __name__ == "__main__":
    main()

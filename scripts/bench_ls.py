"""ls and show over a dump of many segments: with the consolidated index vs opening every segment.

Records ``--segments`` steps (one segment each, two small probes a step, inline writer), then in
fresh processes, interleaved ``--rounds`` times: ``inkling-probe ls DUMP`` and ``inkling-probe show
DUMP layers.0.x --step N`` with the rank's consolidated index (docs/FORMAT.md) and with it moved
away (what every reader did before it: one HDF5 open a segment). Prints medians and the ratio.

    .venv/bin/python scripts/bench_ls.py [--segments 5000] [--rounds 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def record(path: str, n: int) -> None:
    import torch

    import inkling_probe

    with inkling_probe.recording(path, writer="inline"):
        for s in range(n):
            inkling_probe.step()
            inkling_probe.probe("layers.0.x", torch.full((4, 8), float(s)))
            inkling_probe.probe("layers.0.y", torch.full((4, 8), float(-s)))


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "inkling_probe.cli", *args], check=True, capture_output=True,
                   cwd=tempfile.gettempdir())
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", help="record the dump here and keep it (reused when already there)")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="bench-ls-")
    path = os.path.join(root, f"d{a.segments}")
    try:
        if not os.path.isdir(path):
            t0 = time.perf_counter()
            record(path, a.segments)
            print(f"recorded {a.segments} segments in {time.perf_counter() - t0:.0f} s (closing included)")
        (index,) = [n for n in os.listdir(path) if n.endswith(".index")]
        away = os.path.join(root, index + ".away")
        step = str(a.segments * 4 // 5)
        runs = {k: [] for k in ("ls, index", "ls, segments", "show, index", "show, segments")}
        for _ in range(a.rounds):
            for how in ("index", "segments"):
                if how == "segments":
                    os.rename(os.path.join(path, index), away)
                try:
                    runs[f"ls, {how}"].append(timed(["ls", path]))
                    runs[f"show, {how}"].append(timed(["show", path, "layers.0.x", "--step", step]))
                finally:
                    if how == "segments":
                        os.rename(away, os.path.join(path, index))
        med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
        print(f"{a.segments} segments, medians of {a.rounds} interleaved rounds (fresh processes):")
        for cmd in ("ls", "show"):
            i, s = med[f"{cmd}, index"], med[f"{cmd}, segments"]
            print(f"  {cmd:5s} consolidated index {i:6.2f} s [{min(runs[f'{cmd}, index']):.2f}-"
                  f"{max(runs[f'{cmd}, index']):.2f}] | every segment opened {s:6.2f} s "
                  f"[{min(runs[f'{cmd}, segments']):.2f}-{max(runs[f'{cmd}, segments']):.2f}] | {s / i:.1f}x")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

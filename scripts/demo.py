"""The demo: find a planted NVFP4 scale bug in a tensor-parallel Inkling port.

1. make a small random Inkling checkpoint (bf16) and its NVFP4 twin (same seed);
2. record the reference: transformers' Inkling on the bf16 checkpoint (the truth);
3. record a control: inkling_model at TP=1 on the NVFP4 checkpoint, loaded correctly (what NVFP4
   itself costs: the noise floor);
4. record the candidate: inkling_model at TP=2 on the NVFP4 checkpoint with the `raw_input_amax`
   fault planted (the mapper forgets to divide input_amax by 6 * 448);
5. compare candidate vs reference with the control as noise floor: the culprit must be the first
   NVFP4 layer's routed experts, explained by a 2688x input scale;
6. write the bug-report folder (report.html, plots, slice.h5, repro.sh, the standalone
   test_repro.py) and its .zip, and print where they are.

Everything goes through the `inkling-probe` CLI, the way a user would run it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

TOKENS = ",".join(str(t) for t in (1, 17, 42, 99, 7, 300, 12, 5, 88, 256, 31, 64, 9, 410, 3, 77))


def sh(*args: str, check: bool = True, env: dict | None = None) -> int:
    prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
    print(f"$ {prefix}inkling-probe " + " ".join(args), flush=True)
    code = subprocess.call([sys.executable, "-m", "inkling_probe.cli", *args], env={**os.environ, **(env or {})})
    if check and code != 0:
        sys.exit(f"demo: `inkling-probe {args[0]}` failed with exit code {code}")
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="work folder (default: a new temp folder)")
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()
    work = args.out or tempfile.mkdtemp(prefix="inkling-demo-")
    if args.out and os.path.exists(work):
        shutil.rmtree(work)
    t0 = time.perf_counter()
    bf16, nvfp4 = os.path.join(work, "ckpt-bf16"), os.path.join(work, "ckpt-nvfp4")
    sh("make-checkpoint", "--preset", args.preset, "--seed", "0", bf16)
    sh("make-checkpoint", "--preset", args.preset, "--seed", "0", "--quant", "nvfp4", nvfp4)
    ref, control, cand = (os.path.join(work, n) for n in ("ref-hf-bf16", "control-nvfp4-tp1", "cand-nvfp4-tp2"))
    common = ["--dtype", "bf16", "--tokens", TOKENS]
    sh("run", "--ckpt", bf16, "--impl", "hf", *common, "--dump", ref)
    sh("run", "--ckpt", nvfp4, "--impl", "native", "--tp", "1", *common, "--dump", control)
    sh("run", "--ckpt", nvfp4, "--impl", "native", "--tp", "2", *common, "--fault", "raw_input_amax",
       "--dump", cand)
    code = sh("compare", ref, cand, "--control", control, check=False)
    # The report's standalone repro re-runs the loader on the culprit's checkpoint tensors with the
    # settings the candidate ran with (its dump recorded INKLING_FAULT=raw_input_amax): it fails, as it
    # should, here and in a clean shell (bug-report/repro.sh).
    report = os.path.join(work, "bug-report")
    sh("report", ref, cand, "--control", control, "--ckpt", nvfp4, "-o", report)
    print(f"\ndemo: compare exited {code} (1 = divergence found) after {time.perf_counter() - t0:.0f} s; "
          f"dumps in {work}")
    print(f"demo: bug report in {report}/report.html (attach {report}.zip)")
    sys.exit(0 if code == 1 else 1)


if __name__ == "__main__":
    main()

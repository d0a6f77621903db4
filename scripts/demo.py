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

``--multimodal`` plays the "image not visible" hunt instead (docs/MULTIMODAL.md): a multimodal
checkpoint, a synthetic PNG and WAV, transformers' InklingForConditionalGeneration as the reference,
inkling_model at TP=2 with the image rows re-normalised after the fusion (``renorm_fused_rows``),
compare naming the fused stream, the image's rows and the split, then ``--rows text`` and
``--rows image`` judging one modality each.
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
    ap.add_argument("--multimodal", action="store_true", help="the image hunt (vision rows re-normalised)")
    args = ap.parse_args()
    if args.multimodal:
        return multimodal(args)
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


def _media(work: str) -> tuple[str, str]:
    """A synthetic 5x6 RGB PNG and a 0.2 s chirp WAV (nothing downloaded)."""
    import numpy as np

    from inkling_model.multimodal.media_io import write_png, write_wav

    g = np.random.default_rng(0)
    t = np.arange(3200) / 16000
    png = write_png(os.path.join(work, "image.png"), g.integers(0, 256, (5, 6, 3), dtype=np.uint8))
    wav = write_wav(os.path.join(work, "audio.wav"), 0.3 * np.sin(2 * np.pi * (300 + 2000 * t) * t))
    return str(png), str(wav)


def multimodal(args) -> None:
    """The image hunt (module docstring)."""
    work = args.out or tempfile.mkdtemp(prefix="inkling-demo-mm-")
    if args.out and os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work, exist_ok=True)
    t0 = time.perf_counter()
    ckpt = os.path.join(work, "ckpt-mm")
    sh("make-checkpoint", "--preset", args.preset, "--seed", "0", "--multimodal", ckpt)
    png, wav = _media(work)
    from inkling_model.multimodal.config import MultimodalConfig

    mm = MultimodalConfig.from_pretrained(ckpt)
    tokens = f"1,17,42,{mm.image_token_id},99,7,{mm.audio_token_id},300,12"
    common = ["--tokens", tokens, "--image", png, "--audio", wav]
    ref, cand = os.path.join(work, "ref-hf"), os.path.join(work, "cand-tp2-renorm")
    sh("run", "--ckpt", ckpt, "--impl", "hf", *common, "--dump", ref)
    sh("run", "--ckpt", ckpt, "--tp", "2", *common, "--fault", "renorm_fused_rows", "--dump", cand)
    code = sh("compare", ref, cand, check=False)
    for kind in ("image", "text"):
        sh("compare", ref, cand, "--rows", kind, "--no-explain", check=False)
    print(f"\ndemo: compare exited {code} (1 = divergence found) after {time.perf_counter() - t0:.0f} s; dumps in {work}")
    sys.exit(0 if code == 1 else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Write inkling_model's image processor against transformers' InklingImageProcessor, one line per
image, to a text file (for docs/gpu/; needs torchvision, as transformers' processor does).

    python3 scripts/image_parity.py docs/gpu/image_parity.txt

Exit 0 when every image compared is within tolerance, 1 when one is not (or ours refused one that
transformers took), 2 when transformers' processor cannot run here or refused every image (the
reason is printed: nothing compared is no all-clear). An image transformers refuses is a "skip"
line with its error, not a traceback.
"""
from __future__ import annotations

import argparse
import platform
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="text file to write")
    args = ap.parse_args()
    from inkling_model.multimodal import processor_parity as pp

    reason = pp.missing()
    if reason:
        print(f"image parity: not run: {reason}", file=sys.stderr)
        return 2
    import torch
    import torchvision
    import transformers

    results = [pp.run_case(c) for c in pp.cases()]
    compared = [r for r in results if not r["refused"]]
    head = [f"# inkling_model image processor vs transformers {transformers.__version__} InklingImageProcessor "
            f"(torch {torch.__version__}, torchvision {torchvision.__version__}, python {platform.python_version()})",
            f"# {sum(r['ok'] for r in compared)} of {len(compared)} images compared within tolerance; "
            f"{sum(r['max_abs'] == 0 for r in compared)} bit-exact; {len(results) - len(compared)} refused by a side"]
    text = "\n".join(head + [pp.line(r) for r in results]) + "\n"
    try:
        with open(args.out, "w") as f:
            f.write(text)
    except OSError as e:
        print(f"image parity: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(text, end="")
    if not compared:
        print("image parity: not run: transformers refused every image (see the skip lines)", file=sys.stderr)
        return 2
    return 0 if all(r["ok"] for r in compared) else 1


if __name__ == "__main__":
    sys.exit(main())

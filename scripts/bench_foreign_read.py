"""Reading every tensor of one safetensors file through the foreign reader: seconds for N tensors,
side by side, so growth is seen as a ratio (linear: doubling N doubles the time).

    python scripts/bench_foreign_read.py [N ...]      (default 500 1000 2000)
"""
from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time

import numpy as np


def write(path: str, n: int) -> None:
    """A safetensors file of ``n`` float32 tensors [16], laid out as safetensors writes them."""
    header, data = {}, []
    for i in range(n):
        header[f"layers.{i}.out"] = {"dtype": "F32", "shape": [16], "data_offsets": [64 * i, 64 * (i + 1)]}
        data.append(np.full(16, i, np.float32).tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(data))


def read_all(path: str) -> float:
    import inkling_probe

    start = time.perf_counter()
    d = inkling_probe.open(path)
    for i, key in enumerate(d.keys()):
        assert d.array(key)[0] == float(i)
    return time.perf_counter() - start


def main(sizes: list[int]) -> None:
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        write(os.path.join(tmp, "warm.safetensors"), 10)
        read_all(os.path.join(tmp, "warm.safetensors"))  # imports are not the reader's cost
        for n in sizes:
            path = os.path.join(tmp, f"t{n}.safetensors")
            write(path, n)
            seconds = read_all(path)
            per = seconds / n
            base = base or per
            print(f"{n:6d} tensors  {seconds:7.3f} s  {1e6 * per:8.1f} us/tensor  x{per / base:.2f} per tensor vs {sizes[0]}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [500, 1000, 2000])

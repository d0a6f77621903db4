"""The demo: record a small built-in torch model with module capture, then list the dump.

(This becomes the Inkling hunt once compare lands: see README.md.)
"""
import os
import subprocess
import sys
import tempfile

import torch

import inkling_probe


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 64)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(64, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.down(self.act(self.up(x))))


def main():
    torch.manual_seed(0)
    out = os.path.join(tempfile.mkdtemp(prefix="inkling-demo-"), "dump")
    model = TinyMLP().eval()
    with torch.no_grad(), inkling_probe.record(model, out):
        for _ in range(2):
            inkling_probe.step()
            model(torch.randn(8, 16))
    print(f"recorded to {out}")
    sys.exit(subprocess.call(["inkling-probe", "ls", out, "--step", "1"]))


if __name__ == "__main__":
    main()

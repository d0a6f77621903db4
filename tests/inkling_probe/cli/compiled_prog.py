"""A small program ``bisect compiler`` tests run as --cmd: ``python compiled_prog.py BACKEND DUMP [branch]``.

BACKEND ``none`` records eagerly (the reference); else the program is compiled with BACKEND and
recorded through record_compiled. ``branch`` plants an is_compiling() branch with a bug (wrong at
every stage, the first being dynamo with the eager backend).
"""
import sys

import torch

import inkling_probe
from inkling_probe.compiled.session import record_compiled


def prog(x, branch=False):
    """Two probe points; with ``branch`` the compiled path scales by 3 instead of 2."""
    h = x * (3.0 if branch and torch.compiler.is_compiling() else 2.0)
    inkling_probe.probe("p.h", h)
    out = torch.tanh(h) + x
    inkling_probe.probe("p.out", out)
    return out


def main(backend, dump, fault=""):
    x = torch.linspace(-2, 2, 64).reshape(8, 8)
    branch = fault == "branch"
    if backend == "none":
        with torch.no_grad(), inkling_probe.recording(dump):
            prog(x)
        return
    c = torch.compile(lambda t: prog(t, branch), backend=backend)
    record_compiled(lambda: c(x), dump, backend=backend)


if __name__ == "__main__":
    main(*sys.argv[1:])

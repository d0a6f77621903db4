"""Reference rows (store/refs.py) under a kill: every finished step's references read as their targets.

A child records each tensor of a step twice (the second a reference) and says ``done N`` once
``step()`` returned; the parent kills it (its writer process too) and checks the dump, as
test_crash.py does for stored tensors.
"""
import os
import signal
import subprocess
import sys

import pytest
import torch

import inkling_probe

pytestmark = pytest.mark.slow

CHILD = """
import sys
import torch
import inkling_probe

for n in range(1000):
    inkling_probe.step()
    print(f"done {n}", flush=True)
    sys.stdin.readline()
    for i in range(6):
        t = torch.arange(1000 * n + i, 1000 * n + i + (70_000 if i == 2 else 50), dtype=torch.float32)
        inkling_probe.probe(f"a{i}", t)
        inkling_probe.probe(f"b{i}", t)
"""


def _want(n: int, i: int) -> torch.Tensor:
    return torch.arange(1000 * n + i, 1000 * n + i + (70_000 if i == 2 else 50), dtype=torch.float32)


@pytest.mark.parametrize("writer", ["process", "inline"])
def test_kill_after_a_step_keeps_its_references(tmp_path, writer):
    env = {**os.environ, "INKLING_PROBE": str(tmp_path / "d"), "INKLING_PROBE_WRITER": writer}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        for line in child.stdout:
            if line.decode().split() == ["done", "3"]:
                os.killpg(child.pid, signal.SIGKILL)  # the writer process too
                break
            child.stdin.write(b"\n")
            child.stdin.flush()
    finally:
        child.wait(30)
    d = inkling_probe.open(str(tmp_path / "d"))
    assert d.complete_through_step() == 2
    for n in range(3):
        for i in range(6):
            assert d.rows(f"b{i}", n)[0]["ref"] == f"a{i}"
            assert torch.equal(d.tensor(f"b{i}", n), _want(n, i)) and torch.equal(d.tensor(f"a{i}", n), _want(n, i))

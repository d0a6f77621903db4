"""scripts/bench_record.py's floor done in the forward: the bytes it hashes and writes are the bytes
``record(model)`` stores for the same forward, so record / floor compares like with like."""
from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

import bench_record  # noqa: E402

import inkling_probe  # noqa: E402

transformers = pytest.importorskip("transformers")


def test_the_in_forward_floor_writes_what_record_stores_each_tensor_once(tmp_path):
    kwargs, seq = bench_record.SHAPES["tiny"]
    torch.manual_seed(0)
    model = transformers.InklingForCausalLM(transformers.InklingTextConfig(**kwargs)).eval()
    ids = torch.randint(0, kwargs["vocab_size"], (1, seq))
    run = bench_record.floor_in_forward_run(model, ids, str(tmp_path), steps=2)
    with torch.no_grad():
        run()
    sizes = [os.path.getsize(tmp_path / f"fl-{n}") for n in (1, 2)]
    with torch.no_grad(), inkling_probe.recording(tmp_path / "d", writer="inline"):
        with inkling_probe.record(model, inputs=False):
            inkling_probe.step()
            model(ids)
    d = inkling_probe.open(tmp_path / "d")
    step = d.index[0]["step"]
    assert any(r["ref"] for r in d.index)  # outputs met again (a layer's attention output) are skipped
    stored = sum(r["numel"] * 4 for r in d.index if not r["ref"] and r["dtype"] == "float32") + \
        sum(r["numel"] * 8 for r in d.index if not r["ref"] and r["dtype"] == "int64")
    assert {r["dtype"] for r in d.index if r["step"] == step} <= {"float32", "int64"}
    assert sizes == [stored, stored]  # and no tensor skipped because its memory was reused

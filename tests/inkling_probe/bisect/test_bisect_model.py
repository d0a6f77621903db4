"""bisect layers and precision on the tiny NVFP4 model (subprocess runs of ``inkling-probe run``)."""
import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from inkling_probe.cli import group

PY = sys.executable
TOKENS = "1,2,3,4,5,6,7,8"
AMAX = "model.llm.layers.4.mlp.experts.w13_input_amax"

pytestmark = pytest.mark.slow


def _run(ckpt, extra=""):
    return f"{PY} -m inkling_probe.cli run --ckpt {ckpt} --tokens {TOKENS} --dump {{dump}}{extra}"


def _invoke(args):
    return CliRunner().invoke(group, args, catch_exceptions=False)


def test_layers_finds_raw_input_amax_within_the_bound(nvfp4_ckpt, tmp_path):
    r = _invoke(["bisect", "layers", "--ref", _run(nvfp4_ckpt), "--cand", _run(nvfp4_ckpt, " --fault raw_input_amax"),
                 "-w", str(tmp_path / "w"), "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    ans = doc["answer"]
    assert ans["layer"] == "layers.3"  # faults.location("raw_input_amax", tiny) is layers.3.mlp.experts
    assert ans["culprit"].startswith("layers.3.mlp.experts")
    assert ans["runs_per_side"] <= ans["bound"] == 5  # ceil(log2 6) + 2
    assert len(doc["runs"]) == 2 * ans["runs_per_side"]
    assert all(x["dump"] and x["tail"] for x in doc["runs"])


def _dump(ckpt, out):
    """A reference dump, recorded in this process (torch is imported already)."""
    r = _invoke(["run", "--ckpt", str(ckpt), "--tokens", TOKENS, "--dump", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_precision_names_the_layer_that_must_stay_bf16(nvfp4_ckpt, corrupted_copy, tmp_path, monkeypatch):
    def raw_amax(v):
        v.view(np.float32)[:] *= 2688  # layer 4 only: its input_scale becomes the raw amax

    bad = corrupted_copy(nvfp4_ckpt, tmp_path / "bad", AMAX, raw_amax, itemsize=4)
    with monkeypatch.context() as m:
        m.setenv("INKLING_BF16_LAYERS", "all")  # the reference: every layer's experts unquantized
        ref = _dump(nvfp4_ckpt, tmp_path / "ref")
    ctl = _dump(nvfp4_ckpt, tmp_path / "ctl")
    r = _invoke(["bisect", "precision", "--cmd", _run(bad), "--layers", "3-5", "--oracle", f"compare:{ref}",
                 "--control", str(ctl), "-w", str(tmp_path / "w"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["answer"]["reference_layers"] == [4] and doc["answer"]["quantized_layers"] == [3, 5]
    assert doc["runs"][0]["passed"]  # every layer at reference precision passes the oracle

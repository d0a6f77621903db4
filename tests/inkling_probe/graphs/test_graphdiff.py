"""`inkling-probe graphdiff` on CPU with synthetic eager vs "replay" dumps: a NaN born at one probe
point of one decode step is named there (not where it is biggest); equal dumps exit 0; --run records
both sides through the INKLING_ENFORCE_EAGER switch; bad input exits 2."""
import json

import pytest
import torch
from click.testing import CliRunner

from inkling_probe.cli import group

import dumps as dumps_helper

KEYS = ["embed", "layers.0.attn.out", "layers.0.attn.o_proj", "layers.0.resid", "layers.1.attn.o_proj", "logits"]


def _steps(nan_at=None):
    """Step 0 = prefill (eager on both sides), steps 1-3 decode; ``nan_at`` = (key, step) where NaN is born."""
    g = torch.Generator().manual_seed(0)
    steps = []
    for step in range(4):
        x = torch.randn(1 if step else 5, 16, generator=g)
        items, poisoned = [], False
        for key in KEYS:
            x = x + torch.tanh(x)
            if nan_at == (key, step):
                x, poisoned = torch.full_like(x, float("nan")), True
            items.append((key, x * 3 if poisoned and key == "logits" else x))
        steps.append(items)
    return steps


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gd")
    return {"eager": dumps_helper.write(root / "eager", _steps()),
            "same": dumps_helper.write(root / "same", _steps()),
            "bad": dumps_helper.write(root / "bad", _steps(("layers.0.attn.o_proj", 1))), "root": root}


def run(*args):
    return CliRunner().invoke(group, ["graphdiff", *args], catch_exceptions=False)


def test_names_the_birth_of_the_nan(pair):
    r = run(pair["eager"], pair["bad"])
    assert r.exit_code == 1, r.output
    assert "first divergent point: layers.0.attn.o_proj at step 1 (16 non-finite values in the replay)" in r.output
    doc = json.loads(run(pair["eager"], pair["bad"], "--json").output)
    assert doc["first_divergence"]["key"] == "layers.0.attn.o_proj" and doc["first_divergence"]["step"] == 1
    assert doc["exact"] == 24 - 4  # all but the o_proj and the 3 keys after it at step 1


def test_equal_dumps_exit_0(pair):
    r = run(pair["eager"], pair["same"])
    assert r.exit_code == 0, r.output
    assert "24 of 24 tensors bit-identical, steps [0, 1, 2, 3]" in r.output


def test_bad_input_exits_2(pair, tmp_path):
    assert run(pair["eager"]).exit_code == 2
    assert run(pair["eager"], str(tmp_path / "nope")).exit_code == 2
    assert run("--run", "echo {dump}").exit_code == 2  # no --out
    r = run("--run", "echo nothing", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "{dump}" in r.output


def test_run_records_both_sides(pair, tmp_path):
    """CMD runs twice; here it copies a prepared dump per side (no interpreter start-up in the test)."""
    cmd = (f"sh -c 'if [ \"$INKLING_ENFORCE_EAGER\" = 1 ]; then cp -r {pair['eager']} \"$0\"; "
           f"else cp -r {pair['bad']} \"$0\"; fi' {{dump}}")
    r = run("--run", cmd, "--out", str(tmp_path / "o"))
    assert r.exit_code == 1, r.output
    assert "first divergent point: layers.0.attn.o_proj at step 1" in r.output
    assert (tmp_path / "o" / "eager").is_dir() and (tmp_path / "o" / "graph").is_dir()
    r = run("--run", "sh -c 'exit 3' {dump}", "--out", str(tmp_path / "p"))
    assert r.exit_code == 2 and "eager run failed (exit 3)" in r.output

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
                 "--control-dump", str(ctl), "-w", str(tmp_path / "w"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["answer"]["reference_layers"] == [4] and doc["answer"]["quantized_layers"] == [3, 5]
    assert doc["runs"][0]["passed"]  # every layer at reference precision passes the oracle


# -- the setup docs/BISECT.md recommends: bf16 transformers truth, NVFP4 TP=1 control, NVFP4 TP=2 candidate --
SEED3_TOKENS = "5,77,300,12,9,4,88,101,7,7,450,23,31,64,9,410"


@pytest.fixture(scope="module")
def seed3_runs(tmp_path_factory):
    """Full dumps of the four runs (in this process where it can: torch is imported already)."""
    out = tmp_path_factory.mktemp("seed3")
    for name, quant in (("ck3", []), ("ck3q", ["--quant", "nvfp4"])):
        r = _invoke(["make-checkpoint", "--preset", "tiny", "--seed", "3", *quant, str(out / name)])
        assert r.exit_code == 0, r.output
    common = ["--dtype", "bf16", "--tokens", SEED3_TOKENS]
    runs = {"ref": ["--ckpt", str(out / "ck3"), "--impl", "hf"],
            "control": ["--ckpt", str(out / "ck3q"), "--tp", "1"],
            "cand": ["--ckpt", str(out / "ck3q"), "--tp", "2"],
            "fault": ["--ckpt", str(out / "ck3q"), "--tp", "2", "--fault", "raw_input_amax"]}
    for name, args in runs.items():
        r = _invoke(["run", *args, *common, "--dump", str(out / name)])
        assert r.exit_code == 0, r.output
    return {name: str(out / name) for name in runs}


def _trials_from_full_dumps(monkeypatch, full):
    """Each run of the bisect is a copy of that side's full dump; each trial is compared with the
    INKLING_PROBE_INCLUDE it would have recorded with (compare's include, after the map): the keys
    and values a trial records, without re-running the model four times per trial."""
    import shutil
    from pathlib import Path

    from inkling_probe.bisect import layers as layers_mod
    from inkling_probe.bisect import runner as runner_mod

    def run(command, overrides, folder, record, timeout, on_start=None):
        shutil.copytree(full[command.text], folder / "dump")
        (folder / "include.txt").write_text(overrides.get("INKLING_PROBE_INCLUDE") or "")
        return {"command": command.text, "env": overrides, "exit_code": 0, "crashed": False, "why": None,
                "seconds": 0.0, "tail": "", "dir": f"pending/{folder.name}", "dump": f"pending/{folder.name}/dump"}

    real = layers_mod.compare_dumps

    def judged(ref, cand, control, options):
        include = (Path(cand).parent / "include.txt").read_text()
        return real(ref, cand, control, {**options, **({"include": include.split(",")} if include else {})})

    monkeypatch.setattr(runner_mod, "_run", run)
    monkeypatch.setattr(layers_mod, "compare_dumps", judged)


@pytest.mark.parametrize("cand", ["cand", "fault"])
def test_layers_agrees_with_the_full_compare_in_the_recommended_setup(seed3_runs, cand, tmp_path, monkeypatch):
    from inkling_probe.bisect.layers import LayerSearch
    from inkling_probe.bisect.runner import Command, Runner
    from inkling_probe.bisect.state import State
    from inkling_probe.compare import compare

    runs = seed3_runs
    full = compare(runs["ref"], runs[cand], runs["control"], name_map="hf_inkling", explain=False)
    _trials_from_full_dumps(monkeypatch, {"ref": runs["ref"], "cand": runs[cand], "control": runs["control"]})
    sides = {side: Command(side) for side in ("ref", "cand", "control")}
    ans = LayerSearch(Runner(State(tmp_path / "w", "layers", {})), sides, {"name_map": "hf_inkling"}).run()
    if full.first_divergence is None and not full.unchecked:
        assert not ans["diverged"]  # a benign candidate: exit 0 once compare passes it
    else:
        assert ans["layer"] == ".".join(full.first_divergence.key.split(".")[:2])
        assert (ans["first_divergence"], ans["culprit"]) == (full.first_divergence.key, full.culprit.key)
    if cand == "fault":
        assert ans["culprit"] == "layers.3.mlp.experts"  # faults.location("raw_input_amax", tiny)

"""compare against inkling_model's planted faults: each must be found at its true location, with
the evidence; benign pairs must report no culprit and exit 0.

Dumps (tiny preset, 24 prompt tokens) are recorded once for the module: transformers' Inkling as
the reference (through the shipped hf_inkling map, with module inputs), inkling_model in-process
at TP=1 and spawned at TP=2 (gloo).
"""
import json
import os

import pytest
import torch
from click.testing import CliRunner

from inkling_probe.compare import compare, replay

import hunts
from hunts import IDS

pytestmark = pytest.mark.slow

_native, _hf = hunts.native, hunts.hf


def _tp2(ck, dump, fault=""):
    from inkling_model.cli.run import native_rank
    from inkling_model.parallel import spawn

    old = os.environ.get("INKLING_FAULT")
    os.environ["INKLING_FAULT"] = fault
    try:
        gen = {"temperature": 0.0, "top_k": None, "seed": 0, "expert_parallel": False}
        out = spawn(native_rank, 2, str(ck), "bf16", IDS, 0, None, str(dump), gen)
    finally:
        if old is None:
            os.environ.pop("INKLING_FAULT")
        else:
            os.environ["INKLING_FAULT"] = old
    assert "error" not in out[0], out[0]
    return str(dump)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    root = tmp_path_factory.mktemp("planted")
    config = InklingConfig.preset("tiny")
    ck = write_random_checkpoint(config, root / "ck")
    ckq = write_random_checkpoint(config, root / "ckq", quant="nvfp4")
    bf16, fp32 = torch.bfloat16, torch.float32
    return {
        "config": config, "ck": str(ck), "ckq": str(ckq),
        "hf_bf16": _hf(ck, root / "hf_bf16", bf16),  # the bf16 truth
        "hf_fp32": _hf(ck, root / "hf_fp32", fp32),
        "nvfp4_tp1": _native(ckq, root / "nvfp4_tp1", bf16),  # the correct-NVFP4 control
        "raw_amax_tp2": _tp2(ckq, root / "raw_amax_tp2", "raw_input_amax"),
        "nvfp4_tp2": _tp2(ckq, root / "nvfp4_tp2"),
        "bf16_tp2": _tp2(ck, root / "bf16_tp2"),
        "bf16_tp1": _native(ck, root / "bf16_tp1", bf16),
        "gate_up": _native(ck, root / "gate_up", bf16, ["gate_up_layout"]),
        "renorm_fp32": _native(ck, root / "renorm_fp32", fp32, ["renorm_rows"]),
    }


def _where(name, runs):
    from inkling_model.switches import faults

    return faults.location(name, runs["config"])


def _cli(*args, env=None):
    from inkling_probe.cli import group

    r = CliRunner().invoke(group, ["compare", *args, "--json"], catch_exceptions=False, env=env)
    return r.exit_code, json.loads(r.output)


# --- planted faults -----------------------------------------------------------------------------------
def test_confirm_replays_the_culprit_with_the_candidate_module(runs):
    """--confirm: the culprit's module alone diverges on the reference's inputs with the fault, and
    not without it (the module is built by the registered inkling_model factory)."""
    code, doc = _cli(runs["hf_bf16"], runs["gate_up"], "--confirm", "--ckpt", runs["ck"],
                     env={"INKLING_FAULT": "gate_up_layout"})
    assert code == 1 and doc["culprit"]["key"] == "layers.2.mlp.experts"
    (c,) = [x for x in doc["confirm"] if x["key"] == "layers.2.mlp.experts"]
    assert c["confirmed"] is True and "confirmed" in c["verdict"]
    _, clean = _cli(runs["hf_bf16"], runs["gate_up"], "--confirm", "--ckpt", runs["ck"], env={"INKLING_FAULT": ""})
    (c,) = [x for x in clean["confirm"] if x["key"] == "layers.2.mlp.experts"]
    assert c["confirmed"] is False  # the correct module matches: the fault is not in this module's code



def test_raw_input_amax_is_born_in_the_first_nvfp4_experts_with_2688_on_the_input_scale(runs):
    rep = compare(runs["hf_bf16"], runs["raw_amax_tp2"], control=runs["nvfp4_tp1"])
    assert rep.culprit is not None and rep.culprit.key == _where("raw_input_amax", runs) == "layers.3.mlp.experts"
    scale = rep.findings("layers.3.mlp.experts.input_scale")
    assert scale and scale[0]["hypothesis"] == "constant_ratio"
    assert scale[0]["evidence"]["matches"][0] == "2688 = 6*448"
    out = [f["hypothesis"] for f in rep.findings("layers.3.mlp.experts")]
    # the expert output lost energy through its flushed *input* blocks but holds no zero block itself:
    # no ratio and no flushed story there (the evidence is on input_scale)
    assert "constant_ratio" not in out and "flushed" not in out
    assert all(r.error == 0 or not r.diverged for r in rep.rows if r.layer is not None and r.layer < 3)
    code, doc = _cli(runs["hf_bf16"], runs["raw_amax_tp2"], "--control", runs["nvfp4_tp1"])
    assert code == 1 and doc["culprit"]["key"] == "layers.3.mlp.experts"
    assert doc["first_divergence"]["key"] == "layers.3.mlp.experts"


def test_gate_up_layout_culprit_and_the_interleave_named_by_replay(runs, monkeypatch):
    rep = compare(runs["hf_bf16"], runs["gate_up"])
    where = _where("gate_up_layout", runs)
    assert rep.culprit.key == where == "layers.2.mlp.experts"
    assert rep.first_divergence.key == where

    from inkling_model.switches import faults
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    def module(fault):
        config = InklingConfig.from_pretrained(runs["ck"])
        with faults.activate(fault):
            m = InklingForCausalLM(config, dtype=torch.bfloat16)
            load_checkpoint(m, runs["ck"], config)
        return m.get_submodule(where)

    good = replay(module([]), runs["hf_bf16"], where)
    assert not good.diverged  # the correct module on the reference's inputs: within tolerance
    bad = replay(module(["gate_up_layout"]), runs["hf_bf16"], where)
    assert bad.diverged and bad.layout is not None
    ev = bad.layout.evidence
    assert (ev["parameter"], ev["permutation"], ev["dim"]) == ("w13_weight", "interleaved_as_concat", 1)
    assert ev["residual_rel_rms"] <= bad.outputs[0].threshold

    monkeypatch.setenv("INKLING_FAULT", "gate_up_layout")
    code, doc = _cli(runs["hf_bf16"], runs["gate_up"], "--replay", where, "--ckpt", runs["ck"])
    assert code == 1 and doc["culprit"]["key"] == where
    assert doc["replay"]["layout"]["evidence"]["permutation"] == "interleaved_as_concat"


def test_renorm_rows_names_exactly_those_rows(runs):
    from inkling_model.switches.faults import RENORM_ROWS

    rep = compare(runs["hf_fp32"], runs["renorm_fp32"])
    assert rep.culprit.key == _where("renorm_rows", runs) == "layers.1.attn_norm"
    rows = [f for f in rep.findings("layers.1.attn_norm") if f["hypothesis"] == "confined"]
    assert rows and rows[0]["evidence"]["what"] == "token rows"
    assert rows[0]["evidence"]["indices"] == list(RENORM_ROWS)


# --- benign pairs: no culprit, exit 0 -----------------------------------------------------------------
def _benign(ref, cand, control=None):
    rep = compare(ref, cand, control)
    worst = max(rep.rows, key=lambda r: r.score)
    assert not rep.diverged and rep.culprit is None and rep.first_divergence is None, \
        (worst.key, worst.error, worst.threshold)
    assert any((r.error or 0) > 0 for r in rep.rows)  # the pair does differ: the test could fail
    assert rep.rank_findings == []
    args = [ref, cand] + (["--control", control] if control else [])
    code, doc = _cli(*args)
    assert code == 0 and doc["culprit"] is None and doc["first_divergence"] is None
    return rep


def test_bf16_vs_fp32_with_dtype_defaults(runs):
    rep = _benign(runs["hf_fp32"], runs["bf16_tp1"])
    assert max(r.score for r in rep.rows) < 0.5  # a 2x margin at least


def test_tp2_vs_tp1(runs):
    _benign(runs["bf16_tp1"], runs["bf16_tp2"])


def test_correct_nvfp4_tp2_vs_bf16_truth_with_nvfp4_tp1_control(runs):
    rep = _benign(runs["hf_bf16"], runs["nvfp4_tp2"], runs["nvfp4_tp1"])
    assert rep.row("layers.3.mlp.experts").floor > 0.05  # NVFP4 itself costs this much: the floor absorbs it
    assert compare(runs["hf_bf16"], runs["nvfp4_tp2"]).culprit.key == "layers.3.mlp.experts"  # ... without it, flagged

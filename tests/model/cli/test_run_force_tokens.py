"""``inkling-probe run --force-tokens REF_DUMP``: a fault planted in decode only (layer 2's attention
decode branch negated) makes the candidate decode other tokens, so compare sets its later steps aside;
forced, every step is fed the reference's tokens, the candidate's own picks are reported with their
margins (exit 0), and compare names the fault at every decode step. Bad input: one line, exit 2."""
import json
import re

import pytest
import torch
from click.testing import CliRunner

from inkling_model.cli.run import command
from inkling_model.config import InklingConfig
from inkling_model.layers.attention import Attention
import inkling_probe
from inkling_probe.compare import compare

TOKENS = "5,6,7,8,9,10,11,12,13,14,15,16"
NEW = 8


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    return str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path_factory.mktemp("ck") / "tiny", seed=0))


@pytest.fixture(scope="module")
def ref(ckpt, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ref") / "ref")
    res = _run(ckpt, "--dump", path)
    assert res.exit_code == 0, res.output
    return path, _generated(res.output)


def _run(ckpt, *args):
    return CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", TOKENS, "--max-new-tokens", str(NEW), *args],
                              catch_exceptions=False)


def _generated(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("generated:"))


@pytest.fixture
def decode_fault(monkeypatch):
    """Layer 2's attention output negated in the decode branch only (the prefill is right)."""
    plain = Attention._decode

    def faulty(self, *args):
        out = plain(self, *args)
        return -out if self.layer_idx == 2 else out
    monkeypatch.setattr(Attention, "_decode", faulty)


def test_forced_decode_keeps_every_step_aligned_and_the_fault_named(ckpt, ref, decode_fault, tmp_path):
    ref_dump, ref_tokens = ref
    free = _run(ckpt, "--dump", str(tmp_path / "free"))
    assert free.exit_code == 0 and _generated(free.output) != ref_tokens  # the fault changes what it decodes
    forced = _run(ckpt, "--dump", str(tmp_path / "forced"), "--gen-log", str(tmp_path / "g.jsonl"),
                  "--force-tokens", ref_dump)
    assert forced.exit_code == 0, forced.output
    assert _generated(forced.output) == ref_tokens  # every step fed the reference's token
    line = json.loads((tmp_path / "g.jsonl").read_text())
    own = [(k, s) for k, s in enumerate(line["steps"]) if "own" in s]
    assert own and line["forced_from"] == ref_dump
    for k, s in own:
        assert s["forced"] == line["tokens"][k] != s["own"] and s["margin"] > 0
        assert f"step {k}: own {s['own']}, fed {s['forced']} (margin" in forced.stderr
    assert f"own pick differs at {len(own)} step(s)" in forced.stderr

    named = {name: {c.step for c in compare(ref_dump, tmp_path / name, explain=False).culprits
                    if c.key == "layers.2.attn.out"} for name in ("free", "forced")}
    assert named["forced"] == set(range(1, NEW))  # judged at every decode step
    assert not named["free"] >= set(range(1, NEW))  # free: later steps were fed other tokens, set aside


@pytest.mark.parametrize("args, message", [
    (("--force-tokens", "{tmp}/nope"), "no such dump"),
    (("--force-tokens", "{ref}", "--max-new-tokens", str(NEW + 1)), f"decoded {NEW} tokens"),
    (("--force-tokens", "{ref}", "--tokens", "5,6,7"), "the prompt differs"),
    (("--force-tokens", "{ref}", "--tokens", TOKENS.replace("16", "17")), "prompt differs .* at token 11"),
    (("--force-tokens", "{ref}", "--temperature", "0.7"), "nothing is sampled"),
    (("--force-tokens", "{ref}", "--impl", "hf"), "native model"),
    (("--force-tokens", "{empty}"), "no tokens recorded"),
])
def test_bad_input_is_one_line_exit_2(ckpt, ref, tmp_path, args, message):
    with inkling_probe.recording(str(tmp_path / "empty"), writer="inline", include="layers.0.attn_norm"):
        inkling_probe.step()
        inkling_probe.probe("layers.0.attn_norm", torch.zeros(2, 4))
    args = [a.format(tmp=tmp_path, ref=ref[0], empty=tmp_path / "empty") for a in args]
    cli = ["--ckpt", ckpt, "--max-new-tokens", str(NEW), "--dump", str(tmp_path / "c")]
    if "--tokens" not in args:
        cli += ["--tokens", TOKENS]
    res = CliRunner().invoke(command, cli + args)
    assert res.exit_code == 2, res.output
    err = res.output.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err

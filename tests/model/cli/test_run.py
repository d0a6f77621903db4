"""``inkling-probe run``: both implementations on one random checkpoint, TP spawn, faults, bad input."""

import functools

import click
import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_model.cli.run import command
from inkling_model.config import InklingConfig

TOKENS = "5,6,7,8,9,10,11,12,13,14,15,16"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    return str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path_factory.mktemp("ck") / "tiny", seed=0))


def _run(*args):
    return CliRunner().invoke(command, list(args), catch_exceptions=False)


def _generated(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("generated:"))


@functools.lru_cache(maxsize=16)
def _open(path):
    return inkling_probe.open(path)


def _rel(dump_a, dump_b, key, step):
    a, b = _open(dump_a).tensor(key, step), _open(dump_b).tensor(key, step)
    a = a[0] if a.dim() == b.dim() + 1 else a
    return float((b.double() - a.double()).norm() / a.double().norm())


def test_native_and_hf_agree(ckpt, tmp_path):
    nat, ref = str(tmp_path / "native"), str(tmp_path / "hf")
    r1 = _run("--ckpt", ckpt, "--tokens", TOKENS, "--max-new-tokens", "3", "--dump", nat)
    r2 = _run("--ckpt", ckpt, "--impl", "hf", "--tokens", TOKENS, "--max-new-tokens", "3", "--dump", ref)
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    assert _generated(r1.output) == _generated(r2.output)
    assert "from generation_config.json" in r1.output
    from inkling_model.model import probe_points
    from inkling_probe.graphs.forward import how_steps_ran

    assert how_steps_ran(_open(ref)) == how_steps_ran(_open(nat)) == {s: {"eager"} for s in range(3)}

    for step in range(3):  # prefill, then two decode steps: every canonical key
        for key in probe_points(InklingConfig.from_pretrained(ckpt)):
            if key.endswith(".topk_idx"):
                a, b = _open(ref).tensor(key, step), _open(nat).tensor(key, step)
                assert torch.equal(a.sort(-1).values, b.sort(-1).values), (key, step)
            elif not key.endswith(".topk_w"):
                assert _rel(ref, nat, key, step) <= 1e-5, (key, step)


def test_fault_changes_the_run(ckpt, tmp_path):
    ok, bad = str(tmp_path / "ok"), str(tmp_path / "bad")
    assert _run("--ckpt", ckpt, "--tokens", TOKENS, "--dump", ok).exit_code == 0
    res = _run("--ckpt", ckpt, "--tokens", TOKENS, "--fault", "gate_up_layout", "--dump", bad)
    assert res.exit_code == 0 and "faults gate_up_layout" in res.output
    assert _rel(ok, bad, "layers.1.resid", 0) == 0.0  # dense layers untouched
    assert _rel(ok, bad, "layers.2.mlp.experts", 0) > 0.1



def test_fault_from_the_environment_is_honoured(ckpt, tmp_path, monkeypatch):
    """INKLING_FAULT set in the shell plants the fault (a repro script sets it; run used to erase it)."""
    monkeypatch.setenv("INKLING_FAULT", "gate_up_layout")
    res = _run("--ckpt", ckpt, "--tokens", "5,6", "--dump", str(tmp_path / "d"))
    assert res.exit_code == 0 and "faults gate_up_layout" in res.output, res.output

@pytest.mark.slow
def test_tp2_spawned(ckpt, tmp_path):
    ref, tp2 = str(tmp_path / "tp1"), str(tmp_path / "tp2")
    r1 = _run("--ckpt", ckpt, "--tokens", TOKENS, "--max-new-tokens", "2", "--dump", ref)
    r2 = _run("--ckpt", ckpt, "--tp", "2", "--tokens", TOKENS, "--max-new-tokens", "2", "--dump", tp2)
    assert r2.exit_code == 0, r2.output
    assert _generated(r1.output) == _generated(r2.output)
    assert inkling_probe.open(tp2).world_size == 2
    assert _rel(ref, tp2, "layers.3.attn.q", 1) <= 1e-5  # reassembled from the two head shards


@pytest.mark.parametrize("args,message", [
    (["--ckpt", "/nonexistent/ck", "--tokens", "1"], "no such directory"),
    (["--tokens", "1,x"], "expected comma-separated token ids"),
    (["--tokens", "1,99999"], "outside the vocabulary"),
    (["--tokens", "1", "--tp", "3"], "heads = 8 does not divide over an attention group of 3"),
    (["--tokens", "1", "--prompt", "hi"], "exactly one of --tokens and --prompt"),
    ([], "exactly one of --tokens and --prompt"),
    (["--prompt", "hello"], "needs a tokenizer"),
    (["--tokens", "1", "--fault", "nope"], "unknown fault 'nope'"),
    (["--tokens", "1", "--impl", "hf", "--fault", "renorm_rows"], "needs --impl native"),
    (["--tokens", "1", "--impl", "hf", "--tp", "2"], "use --tp 1"),
    (["--tokens", "1", "--eos", "999999"], "--eos 999999: end id 999999 is outside the vocabulary [0, 512)"),
    (["--tokens", "1", "--eos", "-1"], "end id -1 is outside the vocabulary"),
    (["--tokens", "1", "--temperature", "nan"], "--temperature nan: must be a finite number"),
    (["--tokens", "1", "--temperature", "-1"], "--temperature -1: must be >= 0"),
    (["--tokens", "1", "--max-new-tokens", "-2"], "--max-new-tokens -2: must be >= 0"),
    (["--tokens", "1", "--top-k", "0"], "--top-k 0: must be >= 1"),
    (["--tokens", "1", "--seed", "1.5"], "--seed 1.5: expected an integer"),
])
def test_bad_input_is_one_line(ckpt, tmp_path, args, message):
    if "--ckpt" not in args:
        args = ["--ckpt", ckpt, *args]
    res = CliRunner().invoke(command, [*args, "--dump", str(tmp_path / "d")])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_existing_dump_refused(ckpt, tmp_path):
    res = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", "1", "--dump", str(tmp_path)])
    assert res.exit_code == 2 and "already exists" in res.output


def test_through_the_group(ckpt, tmp_path):
    from inkling_probe.cli import group

    res = CliRunner().invoke(group, ["run", "--ckpt", ckpt, "--tokens", "3,4", "--dump", str(tmp_path / "g")])
    assert res.exit_code == 0, res.output
    assert torch.isfinite(inkling_probe.open(str(tmp_path / "g")).tensor("logits")).all()


def test_bf16_native_vs_hf(ckpt, tmp_path):
    nat, ref = str(tmp_path / "nb"), str(tmp_path / "hb")
    assert _run("--ckpt", ckpt, "--dtype", "bf16", "--tokens", TOKENS, "--dump", nat).exit_code == 0
    assert _run("--ckpt", ckpt, "--impl", "hf", "--dtype", "bf16", "--tokens", TOKENS, "--dump", ref).exit_code == 0
    assert inkling_probe.open(nat).tensor("logits").dtype == torch.bfloat16
    err = _rel(ref, nat, "logits", 0)
    print(f"\nbf16 native vs transformers bf16 on a random checkpoint: logits rel_rms {err:.2e}")
    assert err <= 1e-3  # measured 0 (bit-identical) on this CPU


@pytest.mark.parametrize("env,message", [
    ({"INKLING_BF16_LAYERS": "9"}, "INKLING_BF16_LAYERS='9': layer 9 is not in the model (layers 0-5)"),
    ({"INKLING_BF16_LAYERS": "2-x"}, "INKLING_BF16_LAYERS"),
    ({"INKLING_FAULT_RAW_INPUT_AMX": "1"}, "INKLING_FAULT_RAW_INPUT_AMX: no such fault switch"),
    ({"INKLING_FAULT_RAW_INPUT_AMAX": "on"}, "INKLING_FAULT_RAW_INPUT_AMAX='on': expected 1 or 0"),
    ({"INKLING_FAULT": "raw_input_amx"}, "--fault / INKLING_FAULT: unknown fault 'raw_input_amx'"),
    ({"INKLING_ENFORCE_EAGER": "9"}, "INKLING_ENFORCE_EAGER='9': expected 1 or 0"),
    ({"INKLING_CUDA_GRAPH": "maybe"}, "INKLING_CUDA_GRAPH='maybe': expected 1 or 0"),
])
def test_bad_environment_is_one_line_before_any_work(ckpt, tmp_path, monkeypatch, env, message):
    """Checked at start against the model (issue 22: INKLING_BF16_LAYERS=9 on a 6-layer model was
    accepted): nothing runs, no dump is written."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", "1", "--dump", str(tmp_path / "d")])
    assert res.exit_code == 2, res.output
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "d").exists()


def test_run_and_the_model_read_a_fault_switch_alike(monkeypatch):
    """run's start-up check of INKLING_FAULT_<NAME> and the model's own reading (faults.from_env,
    through settings.env_flag) accept and refuse the same spellings: `yes` is on for both."""
    from inkling_model.cli.run import _check_environment
    from inkling_model.config import InklingConfig
    from inkling_model.switches import faults
    from inkling_probe.settings import env_flag

    var, config = faults.switch_var("renorm_rows"), InklingConfig.preset("tiny")
    for text in ("1", "0", "", " yes ", "TRUE", "no", "False", "on", "2", "y", "off", "1.0"):
        try:
            model = faults.from_env({var: text}) == {"renorm_rows"}
        except ValueError:
            model = "refused"
        monkeypatch.setenv(var, text)
        try:
            _check_environment(config)
            checked = env_flag(var)
        except click.ClickException:
            checked = "refused"
        assert checked == model, (text, checked, model)

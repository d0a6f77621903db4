"""``run --gen-log`` and the planted ``no_config_eos``: the end id lives only in config.json, the fault
switches that fallback off, and ``inkling-probe health`` flags the runaway (and passes without it)."""

import json

import pytest
from click.testing import CliRunner

from inkling_model.cli.run import command
from inkling_model.config import InklingConfig
from inkling_probe.cli.health import command as health

PROMPT = "5,6,7,8,9,10,11,12"
CAP = "12"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A checkpoint whose end id is only in config.json, chosen as the third token greedy decode emits."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    path = write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path_factory.mktemp("ck") / "tiny", seed=0)
    probe = tmp_path_factory.mktemp("probe") / "g.jsonl"
    _run(path, "--gen-log", probe, "--max-new-tokens", "3", "--eos", "1")
    tokens = json.loads(probe.read_text())["tokens"]
    assert tokens[2] not in tokens[:2]
    (path / "generation_config.json").unlink()
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "eos_token_id": tokens[2]}))
    return path, tokens[2]


def _run(ckpt, *args):
    res = CliRunner().invoke(command, ["--ckpt", str(ckpt), "--tokens", PROMPT, *map(str, args)],
                                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res


def _health(path, *args):
    return CliRunner().invoke(health, [str(path), "--json", *args])


def test_without_the_fault_the_config_eos_stops_it(ckpt, tmp_path):
    path, eos = ckpt
    res = _run(path, "--gen-log", tmp_path / "ok.jsonl", "--max-new-tokens", CAP)
    line = json.loads((tmp_path / "ok.jsonl").read_text())
    assert (line["finish_reason"], len(line["tokens"]), line["eos_ids"], line["eos_source"]) == \
        ("eos", 3, [eos], "config.json")
    assert len(line["steps"]) == 3 and line["steps"][2]["top"][0][0] == eos and line["steps"][0]["nonfinite"] == 0
    h = _health(tmp_path / "ok.jsonl")
    assert h.exit_code == 0 and json.loads(h.output)["unhealthy"] == 0, h.output


def test_no_config_eos_runs_away_and_health_flags_it(ckpt, tmp_path):
    path, eos = ckpt
    res = _run(path, "--gen-log", tmp_path / "bad.jsonl", "--max-new-tokens", CAP, "--fault", "no_config_eos")
    assert "no end-of-sequence id found" in res.stderr
    line = json.loads((tmp_path / "bad.jsonl").read_text())
    assert line["finish_reason"] == "length" and len(line["tokens"]) == int(CAP) and line["tokens"][2] == eos
    h = _health(tmp_path / "bad.jsonl")
    out = json.loads(h.output)
    assert h.exit_code == 1 and out["responses"][0]["runaway"] and out["worst"] == [0]
    # told the end id, health also sees it emitted and not honoured
    out = json.loads(_health(tmp_path / "bad.jsonl", "--eos", str(eos)).output)
    assert out["responses"][0]["eos_not_honoured"][0] == 2


def test_dump_or_gen_log_required(ckpt):
    res = CliRunner().invoke(command, ["--ckpt", str(ckpt[0]), "--tokens", PROMPT])
    assert res.exit_code == 2 and "pass --dump DIR or --gen-log FILE" in res.output


@pytest.mark.parametrize("args,message", [
    (["--dp", "0"], "--dp 0: must be >= 1"),
    (["--dp", "2", "--impl", "hf"], "it needs --impl native"),
    (["--tokens", "1,2", "--impl", "hf"], "--impl hf runs one request"),
])
def test_dp_bad_input(ckpt, tmp_path, args, message):
    res = CliRunner().invoke(command, ["--ckpt", str(ckpt[0]), "--tokens", PROMPT, *args, "--dump", str(tmp_path / "d")])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output

"""Attention-DP through ``inkling-probe run --dp``: benign runs equal a DP=1 run of the same requests,
each planted ADP fault is localized at its true key by compare (gloo, DP 2 x TP 1 and DP 2 x TP 2)."""

import json

import pytest
from click.testing import CliRunner

import inkling_probe
from inkling_model.switches import faults
from inkling_model.cli.run import command
from inkling_model.config import InklingConfig
from inkling_probe.cli import group
from inkling_probe.compare import compare
from inkling_probe.store.dump import Dump

# three requests of different lengths: group 0 serves 0 and 2, group 1 serves 1 (it idles while 0, 2 decode)
REQUESTS = ["5,6,7,8,9,10,11,12,13,14", "300,301,302,303,304,305,306", "40,41,42,43,44,45,46,47,48,49,50,51"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    return str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path_factory.mktemp("ck") / "tiny", seed=0))


def _run(ckpt, dump, *args):
    tokens = [a for r in REQUESTS for a in ("--tokens", r)]
    res = CliRunner().invoke(command, ["--ckpt", ckpt, *tokens, *args, "--dump", str(dump)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def eos(ckpt, tmp_path_factory):
    """Request 1's first token as the end id: it finishes at once, and its DP group idles (padding
    requests) while group 0 decodes."""
    out = _run(ckpt, tmp_path_factory.mktemp("first") / "d", "--max-new-tokens", "1", "--eos", "0")
    return next(line for line in out.splitlines() if line.startswith("generated[1]:")).split()[1]


@pytest.fixture(scope="module")
def reference(ckpt, eos, tmp_path_factory):
    dump = tmp_path_factory.mktemp("ref") / "dp1"
    return str(dump), _run(ckpt, dump, "--max-new-tokens", "3", "--eos", eos)


def _tokens(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("generated")]


@pytest.mark.slow
def test_run_dp2_equals_dp1(ckpt, eos, reference, tmp_path):
    ref, ref_out = reference
    out = _run(ckpt, tmp_path / "dp", "--dp", "2", "--max-new-tokens", "3", "--eos", eos)
    assert _tokens(out) == _tokens(ref_out) and "dp=2" in out
    assert f"generated[1]: {eos} (eos)" in out
    raw = Dump(str(tmp_path / "dp"), dp_raw=True)  # group 1 ran padding requests in the decode steps
    assert [r["meta"]["requests"] for r in raw.rows("logits", 1)] == [[[0, 1], [2, 1]], [[-1, 1]]]
    dump = inkling_probe.open(str(tmp_path / "dp"))
    assert (dump.dp_size, dump.world_size) == (2, 1)  # read as a one-rank dump of all requests
    assert dump.array("logits", 0).shape == (sum(len(r.split(",")) for r in REQUESTS), 512)
    report = compare(ref, dump)
    assert not report.diverged, [(r.key, r.step, r.error) for r in report.rows if r.status == "diverged"][:5]
    assert len(report.rows) > 3 * 100 and not report.only_ref  # every key of every step, none missing
    assert CliRunner().invoke(group, ["compare", ref, str(tmp_path / "dp")]).exit_code == 0  # the CLI: exit 0


FAULTS = ["adp_global_tp_size", "adp_dense_allreduce"]


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2])
def test_adp_faults_localized(ckpt, eos, reference, tmp_path, tp):
    """DP 2 x TP tp: each fault (the prefill) and, at TP 2, a benign run (3 decode steps; DP 2 x TP 1
    benign is the `run --dp 2` test above) in one spawned world."""
    from adp_util import dp_jobs
    from inkling_model.parallel import spawn

    ref, _ = reference
    prompts = [[int(t) for t in r.split(",")] for r in REQUESTS]
    jobs = [((f,), 1, str(tmp_path / f)) for f in FAULTS] + ([((), 3, str(tmp_path / "benign"))] if tp > 1 else [])
    spawn(dp_jobs, 2 * tp, ckpt, prompts, int(eos), jobs)
    if tp > 1:
        benign = compare(ref, str(tmp_path / "benign"))
        assert not benign.diverged and not benign.only_ref, [(r.key, r.step) for r in benign.rows if r.status == "diverged"][:5]
        assert inkling_probe.open(str(tmp_path / "benign")).world_size == tp
    for fault in FAULTS:
        report = compare(ref, str(tmp_path / fault), steps={0})  # the prefill: decode steps follow other tokens
        truth = faults.location(fault, InklingConfig.preset("tiny"))
        assert report.diverged and report.culprit.key == truth, (fault, report.culprit, report.first_divergence)
        assert report.first_divergence.key == truth, fault
        res = CliRunner().invoke(group, ["compare", ref, str(tmp_path / fault), "--step", "0", "--json"])
        assert res.exit_code == 1 and json.loads(res.output)["culprit"]["key"] == truth, fault


def test_adp_faults_need_dp(ckpt, tmp_path):
    """Without attention-DP neither ADP fault changes a bit (the world is the attention group)."""
    a = _run(ckpt, tmp_path / "a", "--max-new-tokens", "1")
    b = _run(ckpt, tmp_path / "b", "--max-new-tokens", "1", "--fault", "adp_global_tp_size",
             "--fault", "adp_dense_allreduce")
    assert not compare(str(tmp_path / "a"), str(tmp_path / "b")).diverged
    assert _tokens(a) == _tokens(b)

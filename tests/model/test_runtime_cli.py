"""`inkling-probe run` with the decode runtime: --enforce-eager on the CPU equals the default decode;
--cuda-graph without CUDA, a bad --allreduce and an unsupported combination are one-line errors (exit 2)."""
import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_model.cli.run import command
from inkling_model.config import InklingConfig

TOKENS = "5,6,7,8,9,10,11,12,13,14"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    return str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path_factory.mktemp("ck") / "tiny", seed=0))


def _run(*args, env=None):
    return CliRunner().invoke(command, list(args), catch_exceptions=False, env=env)


def test_enforce_eager_runtime_equals_default_decode(ckpt, tmp_path):
    a, b = str(tmp_path / "default"), str(tmp_path / "runtime")
    r1 = _run("--ckpt", ckpt, "--tokens", TOKENS, "--max-new-tokens", "4", "--dump", a)
    r2 = _run("--ckpt", ckpt, "--tokens", TOKENS, "--max-new-tokens", "4", "--allreduce", "oneshot", "--dump", b,
              env={"INKLING_ENFORCE_EAGER": "1"})
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    gen = [next(x for x in r.output.splitlines() if x.startswith("generated:")) for r in (r1, r2)]
    assert gen[0] == gen[1]
    da, db = inkling_probe.open(a), inkling_probe.open(b)
    for step in (1, 2, 3):
        for key in ("layers.5.attn.o_proj", "logits"):
            x, y = da.tensor(key, step), db.tensor(key, step)
            assert float((x - y).norm() / x.norm()) <= 1e-5, (key, step)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_graph_without_cuda_is_bad_input(ckpt, tmp_path):
    r = _run("--ckpt", ckpt, "--tokens", TOKENS, "--cuda-graph", "--dump", str(tmp_path / "d"))
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == ["Error: --cuda-graph needs a CUDA device, and torch.cuda.is_available() "
                                            "is False here"]
    r = _run("--ckpt", ckpt, "--tokens", TOKENS, "--dump", str(tmp_path / "d"), env={"INKLING_CUDA_GRAPH": "1"})
    assert r.exit_code == 2 and "--cuda-graph needs a CUDA device" in r.output


def test_bad_runtime_options(ckpt, tmp_path):
    r = _run("--ckpt", ckpt, "--tokens", TOKENS, "--allreduce", "ring", "--dump", str(tmp_path / "d"))
    assert r.exit_code == 2 and "unknown strategy 'ring'" in r.output
    r = _run("--ckpt", ckpt, "--tokens", TOKENS, "--enforce-eager", "--impl", "hf", "--dump", str(tmp_path / "d"))
    assert r.exit_code == 2 and "(--impl native)" in r.output


def test_enforce_eager_runtime_decodes_several_requests(ckpt, tmp_path):
    """Three requests decoded together by the runtime give what the default decode gives, request by request."""
    reqs = [a for t in (TOKENS, "300,301,302", "40,41,42,43,44,45,46,47,48,49,50,51") for a in ("--tokens", t)]
    r1 = _run("--ckpt", ckpt, *reqs, "--max-new-tokens", "5", "--dump", str(tmp_path / "a"))
    r2 = _run("--ckpt", ckpt, *reqs, "--max-new-tokens", "5", "--enforce-eager", "--dump", str(tmp_path / "b"))
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    gen = [[x for x in r.output.splitlines() if x.startswith("generated[")] for r in (r1, r2)]
    assert len(gen[0]) == 3 and gen[0] == gen[1]


@pytest.mark.slow
def test_enforce_eager_runtime_at_tp2_and_dp2(ckpt, tmp_path):
    """The runtime through the CLI on spawned gloo ranks: --tp 2 and --dp 2 --enforce-eager give the
    default decode's tokens (two requests)."""
    reqs = ["--tokens", TOKENS, "--tokens", "300,301,302"]
    ref = _run("--ckpt", ckpt, *reqs, "--max-new-tokens", "3", "--dump", str(tmp_path / "ref"))
    gen = lambda r: [x for x in r.output.splitlines() if x.startswith("generated[")]  # noqa: E731
    for i, par in enumerate((["--tp", "2"], ["--dp", "2"])):
        r = _run("--ckpt", ckpt, *reqs, *par, "--max-new-tokens", "3", "--enforce-eager", "--dump", str(tmp_path / str(i)))
        assert r.exit_code == 0 and gen(r) == gen(ref) and len(gen(ref)) == 2, (par, r.output, ref.output)

"""``run --compile``: inkling_model's prefill recorded under torch.compile, and the three planted
compile-only faults, each named by ``compilediff`` at its probe point; benign pairs exit 0.

A one-layer tiny checkpoint keeps each compile small. ``compiled_branch`` shows with the plain ``eager``
backend; the benign pairs use ``aot_eager`` (with the two Inductor-only faults on in bf16: they do not
fire there); the two Inductor faults compile with Inductor (measured 20 s and 11 s here, 2 cores).
"""
import pytest
import torch
from click.testing import CliRunner

from inkling_model.cli.run import command
from inkling_model.config import InklingConfig
from inkling_probe.cli import group

TOKENS = "5,6,7,8,9,10,11,12,13,14,15,16"


def _ckpt(root, layers):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint

    tiny = InklingConfig.preset("tiny")
    config = InklingConfig.preset("tiny", num_hidden_layers=layers, layer_types=tiny.layer_types[:layers],
                                  mlp_layer_types=tiny.mlp_layer_types[:layers])
    return str(write_random_checkpoint(config, root, seed=0))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """tiny's first layer alone (dense MLP): each compile small."""
    return _ckpt(tmp_path_factory.mktemp("ck") / "one", 1)


def _run(ckpt, dump, *args):
    torch._dynamo.reset()  # a fresh model each run: no recompile limit across runs of one process
    out = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", TOKENS, "--dump", str(dump), *args],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return out.output


def _diff(eager, compiled):
    return CliRunner().invoke(group, ["compilediff", str(eager), str(compiled)], catch_exceptions=False)


def _pair(ckpt, root, dtype, backend, fault=None):
    args = ["--dtype", dtype] + (["--fault", fault] if fault else [])
    _run(ckpt, root / "eager", *args)
    shown = _run(ckpt, root / "compiled", *args, "--compile", "--compile-backend", backend)
    assert "recorded run: 0 graph break(s)" in shown, shown
    return _diff(root / "eager", root / "compiled")


def test_compiled_branch_named_at_its_norm_even_with_the_eager_backend(ckpt, tmp_path):
    out = _pair(ckpt, tmp_path, "bf16", "eager", "compiled_branch")
    print(out.output)
    assert out.exit_code == 1
    assert "first divergent point: layers.0.attn_norm at step 0" in out.output


@pytest.mark.parametrize("dtype,fault", [("fp32", None), ("bf16", "fusion_rounding,fake_kernel_dtype")])
def test_benign_pairs_exit_0(ckpt, tmp_path, dtype, fault):
    """aot_eager, faults off (fp32) and with the two Inductor-only faults on (bf16): within at every point."""
    out = _pair(ckpt, tmp_path, dtype, "aot_eager", fault)
    print(out.output)
    assert out.exit_code == 0, out.output
    assert "tensors judged" in out.output


@pytest.mark.parametrize("fault,where", [("fusion_rounding", "layers.0.mlp_norm"),
                                         ("fake_kernel_dtype", "layers.0.mlp.out")])
def test_inductor_faults_named_at_their_op(ckpt, tmp_path, fault, where):
    out = _pair(ckpt, tmp_path, "bf16", "inductor", fault)
    print(out.output)
    assert out.exit_code == 1
    assert f"first divergent point: {where} at step 0" in out.output


@pytest.mark.parametrize("args,message", [
    (["--compile-mode", "fastest"], "--compile-mode fastest: expected one of default, max-autotune-no-cudagraphs, reduce-overhead"),
    (["--compile-backend", "tvm"], "--compile-backend tvm: expected one of"),
    (["--compile-backend", "eager", "--compile-mode", "default"], "a mode is Inductor's"),
    (["--max-new-tokens", "2"], "--compile records the prefill: --max-new-tokens 2 must be 0"),
])
def test_bad_compile_options_one_line(ckpt, tmp_path, args, message):
    out = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", TOKENS, "--dump", str(tmp_path / "d"), "--compile",
                                       *args])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and message in out.output, out.output


def test_compile_options_need_compile(ckpt, tmp_path):
    out = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", TOKENS, "--dump", str(tmp_path / "d"),
                                       "--compile-backend", "eager"])
    assert out.exit_code == 2 and "only with --compile" in out.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_cuda_graph_modes_need_a_gpu(ckpt, tmp_path):
    out = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", TOKENS, "--dump", str(tmp_path / "d"), "--compile",
                                       "--compile-mode", "reduce-overhead"])
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert "--compile-mode reduce-overhead: CUDA graphs need a CUDA device" in out.output


@pytest.mark.cuda
@pytest.mark.parametrize("fault,where", [(None, None), ("compiled_branch", "layers.0.attn_norm")])
def test_reduce_overhead_on_the_gpu_records_a_replay(ckpt, tmp_path, fault, where):
    """run --compile --compile-mode reduce-overhead: the prefill compiled with CUDA graphs on the GPU, a
    replay recorded (every row drained from the graph); judged against the eager run on the CPU (bf16
    both): within with no fault, the compiled-only fault named at its norm."""
    args = ["--dtype", "bf16"] + (["--fault", fault] if fault else [])
    _run(ckpt, tmp_path / "eager", *args)
    shown = _run(ckpt, tmp_path / "ro", *args, "--compile", "--compile-mode", "reduce-overhead")
    print(shown)
    assert "recorded run: 0 graph break(s)" in shown and "tensors recorded from a graph replay" in shown, shown
    out = _diff(tmp_path / "eager", tmp_path / "ro")
    print(out.output)
    if fault is None:
        assert out.exit_code == 0, out.output
    else:
        assert out.exit_code == 1 and f"first divergent point: {where} at step 0" in out.output, out.output

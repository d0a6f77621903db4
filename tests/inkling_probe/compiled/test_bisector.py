"""bisect_compiler: PyTorch's CompilerBisector driven by compilediff as the oracle, on inkling_model.

The is_compiling() fault (compiled_branch) diverges already at the first stage (dynamo with the eager
backend): one trial, answer ``eager``. (fusion_rounding bisects into Inductor: minutes; docs/COMPILE.md.)
"""
import torch
from click.testing import CliRunner

from inkling_model.cli.run import command
from inkling_probe.compiled.bisector import bisect_compiler

TOKENS = "5,6,7,8,9,10,11,12,13,14,15,16"


def test_compiled_branch_bisects_to_the_eager_stage(tmp_path):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    tiny = InklingConfig.preset("tiny")
    config = InklingConfig.preset("tiny", num_hidden_layers=1, layer_types=tiny.layer_types[:1],
                                  mlp_layer_types=tiny.mlp_layer_types[:1])
    ckpt = str(write_random_checkpoint(config, tmp_path / "one", seed=0))
    base = ["--ckpt", ckpt, "--tokens", TOKENS, "--dtype", "bf16", "--fault", "compiled_branch"]

    def run(*args):
        out = CliRunner().invoke(command, base + list(args), catch_exceptions=False)
        assert out.exit_code == 0, out.output

    run("--dump", str(tmp_path / "eager"))
    lines = []
    answer = bisect_compiler(lambda backend, dump: run("--dump", str(dump), "--compile", "--compile-backend", backend),
                             tmp_path / "eager", tmp_path, log=lines.append)
    torch._dynamo.reset()
    assert answer == {"backend": "eager", "subsystem": None, "count": None, "trials": 1}
    assert lines == ["trial 1: backend=eager subsystem=-: bad, first divergent point layers.0.attn_norm (rel_rms 0.912)"]

"""bisect_compiler: PyTorch's CompilerBisector driven by compilediff as the oracle, on inkling_model.

The is_compiling() fault (compiled_branch) diverges already at the first stage (dynamo with the eager
backend): one trial, answer ``eager``, and a second call on the same workdir answers from its state.
fusion_rounding bisects into Inductor past the crossref stage, which cannot run with probes (skipped,
counted good, with its line) to
Inductor's emulate_precision_casts: 10 trials, 6 of them Inductor compiles, 153 s on 2 shared cores (slow).
"""
import os

import pytest
import torch
from click.testing import CliRunner

from inkling_model.cli.run import command
from inkling_probe.compiled.bisector import bisect_compiler

TOKENS = "5,6,7,8,9,10,11,12,13,14,15,16"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    tiny = InklingConfig.preset("tiny")
    config = InklingConfig.preset("tiny", num_hidden_layers=1, layer_types=tiny.layer_types[:1],
                                  mlp_layer_types=tiny.mlp_layer_types[:1])
    return str(write_random_checkpoint(config, tmp_path_factory.mktemp("ck") / "one", seed=0))


def _bisect(ckpt, tmp_path, fault):
    base = ["--ckpt", ckpt, "--tokens", TOKENS, "--dtype", "bf16", "--fault", fault]

    def run(*args):
        out = CliRunner().invoke(command, base + list(args), catch_exceptions=False)
        assert out.exit_code == 0, out.output

    run("--dump", str(tmp_path / "eager"))
    lines = []
    answer = bisect_compiler(lambda backend, dump: run("--dump", str(dump), "--compile", "--compile-backend", backend),
                             tmp_path / "eager", tmp_path / "work", log=lines.append)
    torch._dynamo.reset()
    return answer, lines


def test_compiled_branch_bisects_to_the_eager_stage(ckpt, tmp_path):
    answer, lines = _bisect(ckpt, tmp_path, "compiled_branch")
    assert answer == {"backend": "eager", "subsystem": None, "count": None, "trials": 1, "skipped": []}
    assert lines == ["trial 1: backend=eager subsystem=-: bad, first divergent point layers.0.attn_norm (rel_rms 0.912)"]
    again = []
    assert bisect_compiler(None, tmp_path / "eager", tmp_path / "work", log=again.append) == answer
    assert again == lines


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("INKLING_CORPUS_FULL") != "1",
                    reason="six Inductor compiles (70-153 s on 2 cores): INKLING_CORPUS_FULL=1 runs it; "
                           "test_compiled_branch and test_fake_kernel_dtype cover the bisect path")
def test_fusion_rounding_bisects_into_inductor_past_the_crossref_stage(ckpt, tmp_path):
    answer, lines = _bisect(ckpt, tmp_path, "fusion_rounding")
    print("\n".join(lines), answer)
    assert lines[3] == ("trial 4: backend=aot_eager_decomp_partition_crossref subsystem=-: skipped, counted good "
                        "(not the culprit): CrossRefFakeMode has no rule for the with_effects wrapper of the ordered "
                        "inkling_probe::emit op (the fake-vs-real check of custom ops is not made)")
    assert answer["backend"] == "inductor" and answer["skipped"] == ["aot_eager_decomp_partition_crossref"]
    assert answer["subsystem"] == "inductor_emulate_precision_casts" and answer["trials"] == 10
    assert lines[9] == "trial 10: backend=inductor subsystem=inductor_emulate_precision_casts: good, within (17 tensors)"


def test_fake_kernel_dtype_found_by_the_crossref_stage(ckpt, tmp_path):
    """CrossRefFakeMode checks the custom op's fake kernel against its real one before any probe: bad."""
    answer, lines = _bisect(ckpt, tmp_path, "fake_kernel_dtype")
    assert answer == {"backend": "aot_eager_decomp_partition_crossref", "subsystem": None, "count": None,
                      "trials": 4, "skipped": []}
    assert lines[3].startswith("trial 4: backend=aot_eager_decomp_partition_crossref subsystem=-: bad, a fake kernel "
                               "disagrees with its real kernel: When comparing the output of inkling_model.silu_fp32")

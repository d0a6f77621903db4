"""Real hunts for the report and extract tests, recorded once per session (tiny preset, 24 tokens,
in-process, ~6 s): transformers' Inkling as the reference (with module inputs), inkling_model as the
control and as candidates with a planted fault (model/switches/faults.py gives each one's true location).
"""
import pytest
import torch

import hunts



def native(ck, dump, dtype, fault=()):
    return hunts.native(ck, dump, dtype, fault, writer="inline")


hf = hunts.hf


@pytest.fixture(scope="session")
def hunt(tmp_path_factory):
    """Paths: ck / ckq (bf16 and NVFP4 checkpoints, seed 0) and the dumps."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hunt")
    config = InklingConfig.preset("tiny")
    ck = write_random_checkpoint(config, root / "ck")
    ckq = write_random_checkpoint(config, root / "ckq", quant="nvfp4")
    return {
        "root": root, "ck": str(ck), "ckq": str(ckq),
        "ref_bf16": hf(ck, root / "ref-hf-bf16", torch.bfloat16),
        "ref_fp32": hf(ck, root / "ref-hf-fp32", torch.float32),
        "control": native(ckq, root / "control-nvfp4", torch.bfloat16),
        "amax": native(ckq, root / "cand-raw-input-amax", torch.bfloat16, ["raw_input_amax"]),
        "gate_up": native(ck, root / "cand-gate-up-fp32", torch.float32, ["gate_up_layout"]),
    }


@pytest.fixture(scope="session")
def amax_doc(hunt):
    """compare --json of the raw_input_amax hunt (with the NVFP4 control)."""
    from inkling_probe.compare import compare

    return compare(hunt["ref_bf16"], hunt["amax"], hunt["control"]).to_dict()


@pytest.fixture(scope="session")
def amax_report(amax_doc, tmp_path_factory):
    """(folder, Written) of the raw_input_amax report."""
    from inkling_probe.bundle import write_report

    out = tmp_path_factory.mktemp("report") / "rep"
    return out, write_report(amax_doc, out)

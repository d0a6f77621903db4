"""Test helper: a tiny inkling_model with random checkpoint weights (no transformers needed)."""
import torch

from inkling_model.checkpoint.synthetic import random_tensors
from inkling_model.config import InklingConfig
from inkling_model.model import InklingForCausalLM
from inkling_model.checkpoint.weights import load_tensors


def tiny_model(dtype=torch.float32, device="cpu", seed: int = 3, preset: str = "tiny"):
    cfg = InklingConfig.preset(preset)
    model = InklingForCausalLM(cfg, dtype=dtype)
    load_tensors(model, random_tensors(cfg, seed), cfg)
    return model.to(device).eval()


def tiny_nvfp4_model(tmp_dir, dtype=torch.bfloat16, device="cpu", seed: int = 3):
    """The tiny model with NVFP4 routed experts (a random quantized checkpoint written to ``tmp_dir``)."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.checkpoint.weights import load_checkpoint

    cfg = InklingConfig.preset("tiny", quant_method="nvfp4")
    ckpt = write_random_checkpoint(cfg, tmp_dir, seed=seed, quant="nvfp4")
    model = InklingForCausalLM(cfg, dtype=dtype)
    load_checkpoint(model, ckpt, cfg)
    return model.to(device).eval()

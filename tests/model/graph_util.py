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

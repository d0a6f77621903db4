"""Test helper: record real inkling_model hunts in-process (tiny preset, 24 prompt tokens).

Importable as ``hunts`` from every test folder under tests/inkling_probe, like ``dumps``.
"""
from __future__ import annotations

import torch

import inkling_probe

IDS = [(7 * i + 3) % 500 for i in range(24)]


def native(ck, dump, dtype, fault=(), **settings):
    """inkling_model at TP=1 on checkpoint ``ck`` with ``fault`` planted, recorded into ``dump``."""
    from inkling_model.plugins import faults
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    config = InklingConfig.from_pretrained(ck)
    with faults.activate(list(fault)):
        model = InklingForCausalLM(config, dtype=dtype)
        load_checkpoint(model, ck, config)
        with torch.no_grad(), inkling_probe.recording(str(dump), **settings):
            model(torch.tensor(IDS))
    return str(dump)


def hf(ck, dump, dtype):
    """transformers' Inkling on ``ck`` through the shipped hf_inkling map, module inputs included."""
    from inkling_model.checkpoint.hf_reference import load_hf_model

    model = load_hf_model(ck, dtype)
    with torch.no_grad(), inkling_probe.record(model, str(dump), name_map="hf_inkling"):
        inkling_probe.step()
        model(input_ids=torch.tensor([IDS]))
    return str(dump)

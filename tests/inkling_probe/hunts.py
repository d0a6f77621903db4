"""Test helper: record real inkling_model hunts in-process (tiny preset, 24 prompt tokens).

Importable as ``hunts`` from every test folder under tests/inkling_probe, like ``dumps``.
"""
from __future__ import annotations

import contextlib
import os

import torch

import inkling_probe

IDS = [(7 * i + 3) % 500 for i in range(24)]


def native(ck, dump, dtype, fault=(), **settings):
    """inkling_model at TP=1 on checkpoint ``ck`` with ``fault`` planted, recorded into ``dump``."""
    from inkling_model.switches import faults
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    config = InklingConfig.from_pretrained(ck)
    with faults.activate(list(fault)), _run_env(ck, fault):
        model = InklingForCausalLM(config, dtype=dtype)
        load_checkpoint(model, ck, config)
        with torch.no_grad(), inkling_probe.recording(str(dump), **settings):
            model(torch.tensor(IDS))
    return str(dump)


@contextlib.contextmanager
def _run_env(ck, fault):
    """What `inkling-probe run` puts in the environment, which the dump records: the checkpoint's
    identity and the planted faults (so a report's repro carries them)."""
    from inkling_model.switches import faults
    from inkling_probe.bundle import identity

    env = {identity.ENV: identity.checkpoint_identity(ck), faults.ENV: ",".join(fault)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def hf(ck, dump, dtype):
    """transformers' Inkling on ``ck`` through the shipped hf_inkling map, module inputs included."""
    from inkling_model.checkpoint.hf_reference import load_hf_model

    model = load_hf_model(ck, dtype)
    with torch.no_grad(), inkling_probe.record(model, str(dump), name_map="hf_inkling"):
        inkling_probe.step()
        model(input_ids=torch.tensor([IDS]))
    return str(dump)

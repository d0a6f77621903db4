"""Record inkling_model runs: transformers' Inkling (the reference), native TP=1 in this process,
native TP=2 in two spawned gloo ranks that record every TP=2 run of the bench in one spawn.

A run's variant settings: ``impl`` (hf | native), ``tp`` (1 | 2), ``ckpt`` (bf16 | nvfp4) and
``seed`` (the checkpoint's seed). Checkpoints are written once, next to the dumps.
"""
from __future__ import annotations

import os

import torch

ISSUE_PROMPT = 99  # the issue-8 seed-11 demo's tokens
ISSUE_IDS = [5, 17, 42, 7, 99, 3, 64, 12, 8, 250, 31, 77, 400, 2, 9, 1]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def prompt_ids(prompt: int) -> list[int]:
    """Prompt 0 is tests/.../test_planted_faults.py's; others are seeded random ids (24 tokens)."""
    if prompt == ISSUE_PROMPT:
        return list(ISSUE_IDS)
    if prompt == 0:
        return [(7 * i + 3) % 500 for i in range(24)]
    gen = torch.Generator().manual_seed(2000 + prompt)
    return torch.randint(3, 500, (24,), generator=gen).tolist()


def checkpoint(root: str, kind: str, seed: int) -> str:
    """The tiny preset's random checkpoint (bf16 or nvfp4), written on first use."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    path = os.path.join(root, f"inkling_ck_{kind}_seed{seed}")
    if not os.path.isdir(path):
        write_random_checkpoint(InklingConfig.preset("tiny"), path, seed=seed,
                                quant=None if kind == "bf16" else "nvfp4")
    return path


def _hf(ck: str, dtype: str, ids, dump: str) -> None:
    import inkling_probe
    from inkling_model.checkpoint.hf_reference import load_hf_model

    model = load_hf_model(ck, DTYPES[dtype])
    with torch.no_grad(), inkling_probe.record(model, dump, name_map="hf_inkling", writer="inline"):
        inkling_probe.step()
        model(input_ids=torch.tensor([ids]))


def _native(ck: str, dtype: str, fault: str, ids, dump: str, tp=None) -> None:
    import inkling_probe
    from inkling_model.switches import faults
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    config = InklingConfig.from_pretrained(ck)
    with faults.activate([fault] if fault else []):
        model = InklingForCausalLM(config, tp, DTYPES[dtype]) if tp is not None else \
            InklingForCausalLM(config, dtype=DTYPES[dtype])
        load_checkpoint(model, ck, config)
        with torch.no_grad(), inkling_probe.recording(dump, writer="inline"):
            model(torch.tensor(ids))


def tp_rank(rank: int, world: int, jobs: list) -> dict:
    """One spawned rank: record every (ckpt, dtype, fault, ids, dump) job at TP=world."""
    from inkling_model import parallel

    tp = parallel.init()
    failed = {}
    for ck, dtype, fault, ids, dump in jobs:
        try:
            _native(ck, dtype, fault, ids, dump, tp)
        except Exception as e:  # reported per job; the other jobs still run
            failed[dump] = f"{type(e).__name__}: {e}"
    return failed


def dp_requests(prompt: int) -> list[list[int]]:
    """Two requests of different lengths (24 and 17 tokens) for the attention-DP runs."""
    return [prompt_ids(prompt), prompt_ids(prompt + 1)[:17]]


def _cli(ck: str, dtype: str, fault: str, prompt: int, dump: str, dp: int, tp: int) -> None:
    """A multi-request run through ``inkling-probe run`` (attention-DP spawns dp x tp ranks)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "inkling_probe.cli", "run", "--ckpt", ck, "--dtype", dtype, "--dump", dump]
    for ids in dp_requests(prompt):
        cmd += ["--tokens", ",".join(map(str, ids))]
    if dp > 1:
        cmd += ["--dp", str(dp), "--tp", str(tp)]
    if fault:
        cmd += ["--fault", fault]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError((out.stderr or out.stdout).strip().splitlines()[-1])


def record_many(items) -> dict:
    """Record inkling runs: hf and TP=1 here, all TP=2 runs in one spawn of two ranks, multi-request
    (attention-DP and their DP=1 references) through the CLI."""
    from inkling_model.parallel import spawn

    failed, tp2 = {}, []
    for run, dump in items:
        s = dict(run.variant)
        ck = checkpoint(os.path.dirname(dump), s.get("ckpt", "bf16"), s.get("seed", 0))
        ids = prompt_ids(run.prompt)
        if s.get("dp"):
            try:
                _cli(ck, run.dtype, run.fault, run.prompt, dump, s["dp"], s.get("tp", 1))
            except Exception as e:
                failed[run] = f"{type(e).__name__}: {e}"
            continue
        if s.get("tp", 1) == 2:
            tp2.append((run, (ck, run.dtype, run.fault, ids, dump)))
            continue
        try:
            if s.get("impl") == "hf":
                _hf(ck, run.dtype, ids, dump)
            else:
                _native(ck, run.dtype, run.fault, ids, dump)
        except Exception as e:
            failed[run] = f"{type(e).__name__}: {e}"
    if tp2:
        by_dump = {job[4]: run for run, job in tp2}
        for dump, err in spawn(tp_rank, 2, [job for _, job in tp2])[0].items():
            failed[by_dump[dump]] = err
    return failed

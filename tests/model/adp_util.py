"""Test helper: several attention-DP runs in one spawned world (one torch start-up per rank, not per run)."""

from __future__ import annotations


def dp_jobs(rank: int, world: int, ckpt: str, prompts: list[list[int]], eos: int, jobs: list[tuple]) -> list:
    """Run ``jobs`` = [(faults, max_new_tokens, dump), ...] in turn as ``run --dp 2 --eos EOS`` would;
    each job's responses."""
    from inkling_model.switches import faults
    from inkling_model.cli.run import native_rank
    from inkling_model.generate import Eos

    out = []
    for names, max_new, dump in jobs:
        with faults.activate(names):
            gen = dict(temperature=0.0, top_k=None, seed=0)
            out.append(native_rank(rank, world, ckpt, "fp32", prompts, max_new, Eos(eos), dump, gen, dict(dp=2)))
    return out

"""Test helpers for parity runs: rank entry points (importable by spawned ranks) and dump comparison."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

import inkling_probe
from inkling_model import parallel
from inkling_model.config import InklingConfig
from inkling_model.layers.context import StepContext
from inkling_model.model import InklingForCausalLM

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def build(cfg_dict: dict, weights: str, dtype: str, tp=None) -> InklingForCausalLM:
    model = InklingForCausalLM(InklingConfig.from_dict(cfg_dict), tp, DTYPES[dtype])
    model.load_weights(load_file(weights).items())
    return model


def run_rank(rank: int, world: int, cfg_dict: dict, weights: str, ids: list[int], dump: str | None,
             dtype: str = "fp32", expert_parallel: bool = False) -> torch.Tensor:
    """One TP rank: the whole prompt as one request, recorded to ``dump``; returns the logits."""
    model = build(cfg_dict, weights, dtype, parallel.init(expert_parallel=expert_parallel))
    with torch.no_grad():
        if dump is None:
            return model(torch.tensor(ids))
        with inkling_probe.recording(dump):
            return model(torch.tensor(ids))


def run_dp_rank(rank: int, world: int, cfg_dict: dict, weights: str, requests: list[list[int]],
                dtype: str = "fp32"):
    """Attention-DP over every rank: rank r serves requests r, r+world, ...

    Returns ({group: (rank, size)}, [logits of each of its requests]).
    """
    tp = parallel.init(dp_size=world)
    model = build(cfg_dict, weights, dtype, tp)
    mine = requests[rank::world]
    ctx = StepContext([len(r) for r in mine])
    with torch.no_grad():
        logits = model(torch.tensor([t for r in mine for t in r]), ctx)
    groups = {name: (g.rank, g.size) for name, g in (("attn", tp.attn), ("dp_peers", tp.dp_peers), ("moe", tp.moe))}
    return groups, list(logits.split(ctx.seq_lens))


def rel_rms(c: torch.Tensor, r: torch.Tensor) -> float:
    c, r = c.double(), r.double()
    return float((c - r).norm() / r.norm().clamp_min(1e-30))


def _canonical(key: str, ref: torch.Tensor, cand: torch.Tensor, idx_ref=None, idx_cand=None):
    if ref.dim() == cand.dim() + 1 and ref.shape[0] == 1:  # transformers' batch dim
        ref = ref[0]
    if idx_ref is not None:  # top-k order is implementation-defined: compare rows sorted by expert id
        ref = ref.gather(-1, idx_ref.argsort(-1))
        cand = cand.gather(-1, idx_cand.argsort(-1))
    return ref, cand


def compare(ref_dump: str, cand_dump: str, keys: list[str]) -> dict[str, float]:
    """rel_rms per key of the candidate dump against the reference dump (global views)."""
    ref, cand = inkling_probe.open(ref_dump), inkling_probe.open(cand_dump)
    out = {}
    for key in keys:
        r, c = ref.tensor(key), cand.tensor(key)
        ir = ic = None
        if key.endswith((".topk_idx", ".topk_w")):
            base = key.rsplit(".", 1)[0] + ".topk_idx"
            ir, ic = _canonical(base, ref.tensor(base), cand.tensor(base))
            ir, ic = ir.long(), ic.long()
        r, c = _canonical(key, r, c, ir, ic)
        assert r.shape == c.shape, f"{key}: reference {tuple(r.shape)} vs candidate {tuple(c.shape)}"
        out[key] = rel_rms(c, r) if r.is_floating_point() else float((r != c).any())
    return out

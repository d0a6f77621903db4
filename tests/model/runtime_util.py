"""Test helper: plain decode (generate) and the runtime's eager decode of the same requests, side by
side on one model, with every step's logits (run in-process or on each spawned rank)."""

from __future__ import annotations

import torch

PROMPTS = [[5, 77, 300, 12, 9], [1, 2, 3], list(range(40, 51))]  # decoded past the window (8) and extent (16)
MAX_NEW = 14


def load(ckpt: str, dtype=torch.bfloat16, dp: int = 1):
    """The checkpoint's model on this rank's groups (one process: TP 1)."""
    from inkling_model import parallel
    from inkling_model.checkpoint.weights import load_checkpoint
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM

    cfg = InklingConfig.from_pretrained(ckpt)
    model = InklingForCausalLM(cfg, parallel.init(dp_size=dp), dtype)
    load_checkpoint(model, ckpt, cfg)
    return model.eval()


def both(model, prompts=PROMPTS, max_new: int = MAX_NEW, eos=None) -> dict:
    """{"plain"|"runtime": (tokens per request, logits [steps, V] per request)} for this rank's requests
    (attention-DP: group g serves requests g, g + dp, ...)."""
    from inkling_model.generate import generate
    from inkling_model.runtime.runtime import Runtime

    dp = model.tp.dp_size
    mine = list(range(model.tp.dp_peers.rank, len(prompts), dp))
    own = [prompts[i] for i in mine]
    out = {}
    for name in ("plain", "runtime"):
        steps = [[] for _ in own]
        on_step = lambda i, logits: steps[i].append(logits.clone())  # noqa: E731
        if name == "plain":
            res = generate(model, own, max_new, eos, request_ids=mine, on_step=on_step)
        else:  # the same pool length as generate's: the decode branch attends over the whole pool
            rt = Runtime(model, max_batch=4, max_len=max(len(p) for p in own) + max_new, cuda_graph=False)
            res = rt.generate(own, max_new, eos, request_ids=mine, on_step=on_step)
        out[name] = ([r.tokens for r in res], [torch.stack(s).float() for s in steps])
    return out


def check_equal(out: dict, what: str) -> None:
    """Runtime eager equals plain decode bit for bit: tokens and every step's logits."""
    (pt, pl), (rt, rl) = out["plain"], out["runtime"]
    assert pt == rt, (what, pt, rt)
    for i, (a, b) in enumerate(zip(pl, rl)):
        assert torch.equal(a, b), (what, i, float((a - b).abs().max()))


def rank_job(rank: int, world: int, ckpts: dict, layouts: list[int]) -> dict:
    """On every rank: for each checkpoint format and each dp in ``layouts`` (TP = world / dp), plain
    decode and the runtime's eager decode; {"fmt/dp": both(...)}."""
    out = {}
    for fmt, ckpt in ckpts.items():
        for dp in layouts:
            model = load(ckpt, dp=dp)
            out[f"{fmt}/dp{dp}"] = both(model)
            if dp > 1:  # request 1's first token ends it at once: its group idles (padding steps)
                out[f"{fmt}/dp{dp}/idle"] = both(model, eos=_first_token_of(1, out[f"{fmt}/dp{dp}"], model))
    return out


def _first_token_of(request: int, res: dict, model):
    """Request ``request``'s first greedy token (its group's ranks know it; shared with every rank) as an Eos."""
    import torch.distributed as dist

    from inkling_model.generate import Eos

    mine = list(range(model.tp.dp_peers.rank, len(PROMPTS), model.tp.dp_size))
    tok = res["plain"][0][mine.index(request)][0] if request in mine else -1
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, tok)
    return Eos(max(every))

"""Test helper: plain decode (generate), the runtime's eager decode and its graph path run without
capture (``static``: steps padded to the captured batch sizes, under attention-DP the fixed-size MoE
gather) of the same requests, side by side on one model, with every step's logits (run in-process or
on each spawned rank)."""

from __future__ import annotations

import torch

PROMPTS = [[5, 77, 300, 12, 9], [1, 2, 3], list(range(40, 51))]  # decoded past the window (8) and extent (16)
MAX_NEW = 14
RANK_MAX_NEW = 8  # spawned ranks: prompt 2 (11 tokens) still decodes past the extent (16), every prompt past the window


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


SIDES = ("plain", "runtime", "static")


def both(model, prompts=PROMPTS, max_new: int = MAX_NEW, eos=None, static_allreduce: str | None = None) -> dict:
    """{"plain"|"runtime"|"static": (tokens per request, logits [steps, V] per request)} for this rank's
    requests (attention-DP: group g serves requests g, g + dp, ...). ``static_allreduce``: the static
    side runs under that all-reduce strategy, beside a plain run under it ("plain/static"): padding
    changes the all-reduces' sizes, whose ring sum over more than two ranks then orders differently."""
    import contextlib

    from inkling_model import allreduce

    dp = model.tp.dp_size
    mine = list(range(model.tp.dp_peers.rank, len(prompts), dp))
    own = [prompts[i] for i in mine]
    out = {}
    sides = SIDES + (("plain/static",) if static_allreduce else ())
    for name in sides:
        strategy = static_allreduce if name.endswith("static") and static_allreduce else None
        with allreduce.use(strategy) if strategy else contextlib.nullcontext():
            out[name] = _side(model, name.split("/")[0], own, mine, max_new, eos)
    return out


def _side(model, name: str, own, mine, max_new: int, eos) -> tuple:
    from inkling_model.generate import generate
    from inkling_model.runtime.runtime import Runtime

    steps = [[] for _ in own]
    on_step = lambda i, logits: steps[i].append(logits.clone())  # noqa: E731
    if name == "plain":
        res = generate(model, own, max_new, eos, request_ids=mine, on_step=on_step)
    else:  # the same pool length as generate's: the decode branch attends over the whole pool
        rt = Runtime(model, max_batch=4, max_len=max([len(p) for p in own], default=1) + max_new, cuda_graph=name == "static",
                     enforce_eager=False, batch_sizes=(1, 2, 4), capture=False)
        res = rt.generate(own, max_new, eos, request_ids=mine, on_step=on_step)
    return [r.tokens for r in res], [torch.stack(s).float() for s in steps]


def check_equal(out: dict, what: str) -> None:
    """Runtime eager and the static graph path equal plain decode bit for bit: tokens and every step's
    logits (the static side against the plain run under its all-reduce strategy, if it has one)."""
    for side in SIDES[1:]:
        ref = "plain/static" if side == "static" and "plain/static" in out else "plain"
        (pt, pl), (rt, rl) = out[ref], out[side]
        assert pt == rt, (what, side, pt, rt)
        for i, (a, b) in enumerate(zip(pl, rl)):
            assert torch.equal(a, b), (what, side, i, float((a - b).abs().max()))


def rank_job(rank: int, world: int, ckpts: dict, layouts: list[int], static_allreduce: str | None = None) -> dict:
    """On every rank: for each checkpoint format and each dp in ``layouts`` (TP = world / dp), plain
    decode, the runtime's eager decode and its static graph path; {"fmt/dp": both(...)}."""
    out = {}
    for fmt, ckpt in ckpts.items():
        for dp in layouts:
            model = load(ckpt, dp=dp)
            out[f"{fmt}/dp{dp}"] = both(model, max_new=RANK_MAX_NEW, static_allreduce=static_allreduce)
            if dp > 1:  # request 1's first token ends it at once: its group idles (padding steps)
                eos = _first_token_of(1, out[f"{fmt}/dp{dp}"], model)
                out[f"{fmt}/dp{dp}/idle"] = both(model, max_new=RANK_MAX_NEW, eos=eos, static_allreduce=static_allreduce)
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

"""A toy MoE transformer recorded with canonical keys, for the decision-flow tests: causal mean
attention (sequence mixing), a router whose top-2 ids are a declared decision, per-token experts,
a KV cache read by decode steps, and logits whose argmax is the decoded token.

``run(...)`` returns the steps for ``dumps.write``; the candidate can flip routing (a near-tie: its
router scores moved towards the new choice), plant a fault on one key's rows, and decode steps.
"""
from __future__ import annotations

import torch

H, E, V, LAYERS = 32, 8, 40, 5


def _weights(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    return {"emb": r(V, H), "head": r(H, V) / H ** 0.5,
            "layers": [{"wv": r(H, H) / H ** 0.5, "wo": r(H, H) / H ** 0.5, "wr": r(H, E),
                        "experts": r(E, H, H) / H ** 0.5, "norm": 1 + 0.2 * r(H)} for _ in range(LAYERS)]}


def _norm(x, w):
    return x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w


def run(tokens, *, tie=None, flip=False, fault=None, noise=0.0, decode=0, seed=0, noise_seed=1, tie_step=0,
        forced=None, dispatch=None, expert_fault=None, tail_head=False):
    """Steps of (key, tensor[, kwargs]). ``tie=(layer, token)``: that token's 2nd and 3rd expert
    scores are 1e-6 apart (at step ``tie_step``); ``flip``: a noise-sized move swaps them; ``fault=(key, step, rows, fn)``:
    ``fn`` applied to those rows of that key; ``noise``: relative noise on every recorded float;
    ``dispatch``: also record every slot's expert output as ``mlp.experts.act_in`` in an expert
    layout (``"loop"``: one call per hit expert, rows slot-major as transformers' loop; ``"flat"``:
    one call of ``T*k`` rows in token order); ``expert_fault=(layer, expert, scale)``: that expert's
    output scaled (inside the experts: only the per-slot key and the sum see it); ``tail_head``: also
    record the LM head on the last row only, as transformers' generate runs it (``lm_head.in.0``
    ``[1, 1, H]``, ``lm_head`` ``[1, 1, V]``, no token dim)."""
    w = _weights(seed)
    g = torch.Generator().manual_seed(noise_seed)
    cache = [[] for _ in range(LAYERS)]  # per layer: rows of v written so far
    steps, ids = [], list(tokens)
    feed = list(tokens)
    for step in range(decode + 1):
        out = []

        def rec(key, t, **kw):
            if fault and fault[0] == key and fault[1] == step:
                t = t.clone()
                rows = [r for r in fault[2] if r < t.shape[0]]
                t[rows] = fault[3](t[rows])
            if noise and t.is_floating_point():
                t = t * (1 + noise * torch.randn(t.shape, generator=g))
            out.append((key, t, kw) if kw else (key, t))
            return t

        h = rec("embed", w["emb"][torch.tensor(feed)])
        for i, lw in enumerate(w["layers"]):
            p = f"layers.{i}"
            x = rec(f"{p}.attn_norm", _norm(h, lw["norm"]))
            v = rec(f"{p}.attn.v", x @ lw["wv"])
            cache[i].append(v)
            allv = torch.cat(cache[i])  # [past + T, H]
            past = allv.shape[0] - v.shape[0]
            att = torch.stack([allv[: past + t + 1].mean(0) for t in range(v.shape[0])])  # causal mean
            a = rec(f"{p}.attn.out", att @ lw["wo"])
            h = rec(f"{p}.resid_attn", h + a)
            logits = h @ lw["wr"]  # [T, E]
            if tie and tie[0] == i and step == tie_step:  # a near-tie: 2nd and 3rd choice 1e-6 apart
                logits = logits.clone()
                t = tie[1]
                order = torch.argsort(logits[t], descending=True)
                b, c = order[1], order[2]
                gap = 1e-6 * abs(float(logits[t, b]))
                logits[t, c] = logits[t, b] - gap + (2 * gap if flip else 0.0)  # flip: noise moves it over
            logits = rec(f"{p}.mlp.router_logits", logits)
            idx = torch.topk(logits, 2, dim=-1).indices
            rec(f"{p}.mlp.topk_idx", idx, kind="decision", scores=f"{p}.mlp.router_logits")
            scale = lambda e: expert_fault[2] if expert_fault and expert_fault[:2] == (i, e) else 1.0
            slot = lambda t, e: (h[t] @ lw["experts"][e]) * scale(e)
            if dispatch == "loop":
                for e in sorted(set(idx.reshape(-1).tolist())):
                    j, ts = torch.nonzero(idx.T == e, as_tuple=True)
                    rec(f"{p}.mlp.experts.act_in", torch.stack([slot(int(t), e) for t in ts]))
            elif dispatch == "flat":
                rec(f"{p}.mlp.experts.act_in", torch.stack([slot(t, int(e)) for t in range(h.shape[0])
                                                            for e in idx[t].tolist()]))
            ex = torch.stack([sum(slot(t, e) for e in idx[t].tolist()) for t in range(h.shape[0])])
            ex = rec(f"{p}.mlp.experts", ex / 8)
            h = rec(f"{p}.resid", h + ex)
        if tail_head:
            last = rec("lm_head.in.0", h[-1:].unsqueeze(0), token_dim=None)  # [1, 1, H]
            rec("lm_head", last @ w["head"], token_dim=None)  # [1, 1, V]
        lg = rec("logits", h @ w["head"])
        steps.append(out)
        nxt = int(torch.argmax(lg[-1])) if forced is None or step >= len(forced) else forced[step]  # teacher-forced
        ids.append(nxt)
        feed = [nxt]
    return steps

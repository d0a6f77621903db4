"""A dense toy decoder recorded with canonical keys, for decode tests where the tokens part: each step
records its fed ids first (``in.input_ids``, as transformers' models do), then the embedding, per layer
norm, q/k/v, softmax attention over a KV cache, MLP and residuals, then the logits whose argmax is the
next step's token unless ``forced`` says otherwise (teacher-forced).

``run(...)`` returns the steps for ``dumps.write``.
"""
from __future__ import annotations

import torch

H, I, V, LAYERS = 32, 48, 64, 3
PROMPT = [(5 * i + 2) % V for i in range(12)]


def _weights(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) / s[0] ** 0.5  # noqa: E731
    return {"emb": torch.randn(V, H, generator=g), "head": r(H, V),
            "layers": [{"wq": r(H, H), "wk": r(H, H), "wv": r(H, H), "wo": r(H, H), "w13": r(H, 2 * I),
                        "w2": r(I, H)} for _ in range(LAYERS)]}


def _rms(x):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def run(*, decode: int = 8, faults=(), forced=None, noise: float = 0.0, noise_seed: int = 1):
    """Steps of (key, tensor). ``faults``: ``(key, step, fn)``, ``fn`` applied to what that key computes at
    that step (the engine goes on with it); ``forced[step]``: the token fed after ``step`` (None or past
    its end: the step's own argmax); ``noise``: relative, on every recorded float."""
    w = _weights()
    g = torch.Generator().manual_seed(noise_seed)
    cache = [([], []) for _ in range(LAYERS)]
    feed, steps = list(PROMPT), []
    for step in range(decode + 1):
        out = []

        def rec(key, t):
            for k, s, fn in faults:
                if (k, s) == (key, step):
                    t = fn(t)
            r = t * (1 + noise * torch.randn(t.shape, generator=g)) if noise and t.is_floating_point() else t
            out.append((key, r))
            return t

        rec("in.input_ids", torch.tensor(feed))
        h = rec("embed", w["emb"][torch.tensor(feed)])
        n_new = h.shape[0]
        for i, lw in enumerate(w["layers"]):
            p = f"layers.{i}"
            x = rec(f"{p}.attn_norm", _rms(h))
            q, k, v = (rec(f"{p}.attn.{s}", x @ lw[f"w{s}"]) for s in "qkv")
            cache[i][0].append(k)
            cache[i][1].append(v)
            ks, vs = torch.cat(cache[i][0]), torch.cat(cache[i][1])
            mask = torch.full((n_new, ks.shape[0]), float("-inf")).triu(ks.shape[0] - n_new + 1)
            a = rec(f"{p}.attn.out", torch.softmax(q @ ks.T / H ** 0.5 + mask, -1) @ vs)
            h = rec(f"{p}.resid_attn", h + a @ lw["wo"])
            gu = rec(f"{p}.mlp.w13", _rms(h) @ lw["w13"])
            h = rec(f"{p}.resid", h + rec(f"{p}.mlp.out", (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]) @ lw["w2"]))
        logits = rec("logits", _rms(h) @ w["head"])
        steps.append(out)
        own = forced is None or step >= len(forced) or forced[step] is None
        feed = [int(torch.argmax(logits[-1]))] if own else [forced[step]]
    return steps


def tokens(steps) -> list[int]:
    """Each step's decoded token (the argmax of its last logits row)."""
    return [int(torch.argmax(dict((k, t) for k, t in s)["logits"][-1])) for s in steps]


def fed(steps) -> list[list[int]]:
    """Each step's fed ids."""
    return [dict((k, t) for k, t in s)["in.input_ids"].tolist() for s in steps]

"""Late-fault cases on a hand-instrumented engine (keys written through ``probe()``, no module inputs).

- **three independent faults**: a 448x scale written at ``layers.1.attn.q``, ``[gate; up]`` written
  interleaved at ``layers.1.mlp.w13``, rows 5 and 9 x1.5 at ``layers.1.mlp.out``; what is written
  is wrong, what the engine computes is right (a broken dump path), so each is independent of the
  others (compare-rules' test, tests/inkling_probe/compare/test_relations.py). The truth is the
  first; compare must name all three (checked in tests/inkling_probe/compare/test_corpus_late.py).
- **a fault after a different decoded token**: step 0's last row has a near-tie between its top two
  logits that the candidate's noise flips, so step 1 is fed another token (a decision: its row set
  aside); steps 2 and 3 are teacher-forced (the same token on both sides) and read the flipped
  token through the cache; the fault is ``layers.1.mlp.out`` x1.5 at step 2 only. Its benign twin
  has the flip and no fault.
"""
from __future__ import annotations

import torch

T, H, I, V, LAYERS = 16, 32, 24, 40, 3
FAULTS = {"layers.1.attn.q": lambda t: t * 448,
          "layers.1.mlp.w13": lambda t: torch.stack([t[..., :I], t[..., I:]], -1).reshape(t.shape),
          "layers.1.mlp.out": lambda t: _rows(t, (5, 9), 1.5)}


def _rows(t, rows, by):
    t = t.clone()
    t[list(rows)] *= by
    return t


def _weights():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) / s[0] ** 0.5
    return {"emb": torch.randn(V, H, generator=g), "head": r(H, V),
            "layers": [{"wq": r(H, H), "wk": r(H, H), "wv": r(H, H), "wo": r(H, H), "w13": r(H, 2 * I),
                        "w2": r(I, H)} for _ in range(LAYERS)]}


def _rms(x):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def run(*, written=None, computed=None, decode=0, tie=False, flip=False, noise=0.0):
    """Steps of (key, tensor) for ``dumps``-style writing. ``written[key](t)``: what is written (not
    computed); ``computed[(key, step)](t)``: what the engine computes with; ``tie``: step 0's last
    logits row has its top two 1e-6 apart (``flip``: moved over); ``noise``: relative, on every float."""
    written, computed = written or {}, computed or {}
    w = _weights()
    g = torch.Generator().manual_seed(7)
    cache = [([], []) for _ in range(LAYERS)]
    feed = [(5 * i + 2) % V for i in range(T)]
    forced = [(3 * i + 1) % V for i in range(decode + 1)]
    steps = []
    for step in range(decode + 1):
        out = []

        def probe(key, t):
            t = computed.get((key, step), lambda v: v)(t)
            rec = written.get(key, lambda v: v)(t)
            if noise:
                rec = rec * (1 + noise * torch.randn(rec.shape, generator=g))
            out.append((key, rec))
            return t

        h = probe("embed", w["emb"][torch.tensor(feed)])
        n_new = h.shape[0]
        for i, lw in enumerate(w["layers"]):
            p = f"layers.{i}"
            n = probe(f"{p}.attn_norm", _rms(h))
            q, k, v = (probe(f"{p}.attn.{s}", n @ lw[f"w{s}"]) for s in "qkv")
            cache[i][0].append(k)
            cache[i][1].append(v)
            ks, vs = torch.cat(cache[i][0]), torch.cat(cache[i][1])
            past = ks.shape[0] - n_new
            mask = torch.full((n_new, ks.shape[0]), float("-inf")).triu(past + 1)
            a = probe(f"{p}.attn.out", torch.softmax(q @ ks.T / H ** 0.5 + mask, -1) @ vs)
            h = probe(f"{p}.resid_attn", h + probe(f"{p}.attn.o_proj", a @ lw["wo"]))
            n = probe(f"{p}.mlp_norm", _rms(h))
            gu = probe(f"{p}.mlp.w13", n @ lw["w13"])
            act = probe(f"{p}.mlp.act", torch.nn.functional.silu(gu[:, :I]) * gu[:, I:])
            h = probe(f"{p}.resid", h + probe(f"{p}.mlp.out", act @ lw["w2"]))
        logits = _rms(h) @ w["head"]
        if tie and step == 0:
            logits = logits.clone()
            o = torch.argsort(logits[-1], descending=True)
            gap = 1e-6 * abs(float(logits[-1, o[0]]))
            logits[-1, o[1]] = logits[-1, o[0]] - gap + (2 * gap if flip else 0.0)
        probe("logits", logits)
        steps.append(out)
        feed = [int(torch.argmax(logits[-1]))] if step == 0 else [forced[step]]
    return steps


def record(run_, dump) -> None:
    """Record the corpus run ``run_`` (its ``case`` setting picks the engine's arguments)."""
    import inkling_probe

    case = run_.setting("case")
    kw = {"three": {"written": FAULTS} if run_.fault else {},
          "decoded": {"decode": 3, "tie": True, "flip": bool(run_.setting("flip")), "noise": run_.setting("noise", 0.0),
                      "computed": {("layers.1.mlp.out", 2): lambda t: t * 1.5} if run_.fault else {}}}[case]
    with inkling_probe.recording(dump, writer="inline"):
        for items in run(**kw):
            inkling_probe.step()
            for key, t in items:
                inkling_probe.probe(key, t)


def cases(name: str, make_run) -> list:
    """The cases (``make_run(case=..., fault=..., **settings)`` builds a Run of the late family)."""
    from inkling_corpus.case import Case, Trio

    three = Trio(make_run(case="three"), make_run(case="three", fault="three_written"))
    ref = make_run(case="decoded")
    cand = lambda fault="": make_run(case="decoded", fault=fault, flip=1, noise=2e-7)
    return [Case(f"{name}/probe_three_written_faults", "fault", {"fp32": three}, truth=("layers.1.attn.q",),
                 note="three independent faults written through probe(): x448 at layers.1.attn.q, gate/up "
                      "interleaved at layers.1.mlp.w13, rows 5 and 9 x1.5 at layers.1.mlp.out; all three culprits"),
            Case(f"{name}/probe_decoded_token_then_mlp_x1.5_step2", "fault", {"fp32": Trio(ref, cand("mlp_x1.5_step2"))},
                 truth=("layers.1.mlp.out",), step=2,
                 note="a different decoded token at step 0 (near-tie), then layers.1.mlp.out x1.5 at step 2"),
            Case(f"{name}/probe_decoded_token_benign", "benign", {"fp32": Trio(ref, cand())},
                 note="a different decoded token at step 0 (near-tie), teacher-forced after")]

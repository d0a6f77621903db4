"""Test helper: the runtime's eager decode and its static graph path (``capture=False``: the graph
path's padded steps, the in-graph recording's copies and drain) recorded side by side, and the two
dumps compared row by row (every rank's own rows, as recorded)."""

from __future__ import annotations

import torch

PROMPTS = [[5, 77, 300, 12, 9], [1, 2, 3], list(range(40, 51))]


def record_sides(model, root: str, prompts=PROMPTS, max_new: int = 4, eos=None, sides=("eager", "static")) -> dict:
    """Record ``generate`` through the runtime, eagerly and by the static graph path, into
    ``root/<side>``; {side: tokens per request of this rank}."""
    import inkling_probe
    from inkling_model.runtime.runtime import Runtime

    dp = model.tp.dp_size
    mine = list(range(model.tp.dp_peers.rank, len(prompts), dp))
    own = [prompts[i] for i in mine]
    out = {}
    for side in sides:
        with inkling_probe.recording(f"{root}/{side}", writer="inline"), torch.no_grad():
            rt = Runtime(model, max_batch=4, max_len=max(len(p) for p in prompts) + max_new + 1,
                         cuda_graph=side != "eager", enforce_eager=False, batch_sizes=(1, 2, 4),
                         capture=side != "static")
            out[side] = [g.tokens for g in rt.generate(own, max_new, eos, request_ids=mine)]
    return out


def same_rows(eager: str, other: str, check_forward: bool = True, near: str | None = None) -> list:
    """Assert two dumps hold the same rows (key, step, call, rank, shape, dtype, meta, requests) and
    bit-identical tensors, padding requests' values aside (their scratch slot's history differs); returns
    the rows that differ (keys ending in ``near`` may, by <= 1e-6).
    ``check_forward`` False: the ``forward``/``graph_bs`` meta may differ (graph against eager)."""
    from inkling_model.generate import PAD_REQUEST
    from inkling_probe.store.dump import Dump

    a, b = Dump(eager, dp_raw=True), Dump(other, dp_raw=True)
    skip = () if check_forward else ("forward", "graph_bs")

    def ident(d):
        return [(r["key"], r["step"], r["call"], r["rank"], r["shape"], r["dtype"],
                 {k: v for k, v in (r.get("meta") or {}).items() if k not in skip}) for r in d.index]

    ia, ib = ident(a), ident(b)
    assert len(ia) == len(ib), (len(ia), len(ib))
    for x, y in zip(ia, ib):
        assert x == y, (x, y)
    differ = []
    for key, step, call, rank, _, _, meta in ia:
        if all(i == PAD_REQUEST for i, _ in meta.get("requests") or [[0, 0]]):
            continue  # an idle group's padding request: scratch-slot values, no request's rows
        ta, tb = a.tensor(key, step, rank, call), b.tensor(key, step, rank, call)
        if torch.equal(ta, tb):
            continue
        assert near and key.endswith(near), (key, step, rank, float((ta.float() - tb.float()).abs().max()))
        assert float((ta.float() - tb.float()).abs().max()) <= 1e-6, (key, step, rank)
        differ.append((key, step, rank))
    assert len(ia) > 100
    return differ


CASES = {"padded": PROMPTS + [[7, 8], [60, 61, 62, 63]],  # group 0: 3 requests, group 1: 2; batch 4
         "lone": PROMPTS,  # group 0: 2 requests, group 1: 1, padded to 2
         "idle": PROMPTS[:1]}  # group 1 idle throughout: its padding request


def dp_record_job(rank: int, world: int, ckpt: str, root: str) -> dict:
    """One rank of DP 2 x TP (world / 2): record eager and static sides of each of ``CASES``."""
    from runtime_util import load

    model = load(ckpt, dp=2)
    return {case: record_sides(model, f"{root}/{case}", prompts) for case, prompts in CASES.items()}

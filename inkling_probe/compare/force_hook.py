"""Make a transformers MoE router return a reference dump's top-k ids (a forward hook), so a
candidate re-runs without routing flips and compares exactly (docs/COMPARE.md section 4).

    from inkling_probe.compare.force_hook import force_routing
    with force_routing(model, "ref_dump"):           # routers: modules named *.mlp.gate
        with inkling_probe.record(model, "cand_dump"):
            model(input_ids=ids)

A router is a module whose output is a tuple holding an integer ``[T, k]`` tensor (the ids; the
last integer one), as transformers' Qwen2-MoE/Mixtral/OLMoE/Inkling routers return. The reference's
ids are read at the router's own key as ``record()`` names it (``<path>.<index>``, e.g.
``model.layers.1.mlp.gate.2``; ``name_map`` maps the reference's keys first). The n-th call of a
router takes the n-th recorded step. The weights beside the ids are recomputed from the router's
own logits at the reference's experts: ``weights(output, ids) -> tensor`` when given, else
``softmax(logits)`` gathered at the ids (the float ``[T, E]`` element), renormalised when the
router's own weights summed to 1 per token. A router whose weights are another function (a
sigmoid with a bias, a sink) needs ``weights``. torch is imported by the caller's model only.
"""
from __future__ import annotations

import contextlib

import numpy as np

from inkling_probe.settings import matches_any


@contextlib.contextmanager
def force_routing(model, ref_dump, *, routers=("*.mlp.gate",), name_map=None, weights=None):
    """Hooks on every router of ``model`` (module paths matching ``routers``), removed on exit."""
    from inkling_probe.compare.align import entries
    from inkling_probe.store.namemap import NameMap
    from inkling_probe.store.reader import as_dump

    found = [(p, m) for p, m in model.named_modules() if p and matches_any(p, list(routers))]
    if not found:
        raise ValueError(f"force_routing: no module of the model matches {list(routers)}")
    dump = as_dump(ref_dump)
    ents = entries(dump, NameMap.load(name_map) if name_map is not None else None, "reference")
    calls: dict = {}
    handles = [m.register_forward_hook(_hook(p, dump, ents, calls, weights)) for p, m in found]
    try:
        yield handles
    finally:
        for h in handles:
            h.remove()


def _hook(path, dump, ents, calls, weights):
    def hook(module, inputs, output):
        import torch

        if not isinstance(output, tuple):
            raise ValueError(f"force_routing: {path} returns no tuple; it is not a router")
        at = [i for i, t in enumerate(output) if torch.is_tensor(t) and not t.is_floating_point()]
        if not at:
            raise ValueError(f"force_routing: {path} returns no integer ids")
        i = at[-1]
        n = calls[path] = calls.get(path, -1) + 1
        key = f"{path}.{i}"
        steps = sorted(s for (k, s, c) in ents if k == key and c == 0)
        if n >= len(steps):
            raise ValueError(f"force_routing: {key}: call {n} has no recorded step in the reference")
        e = ents[(key, steps[n], 0)]
        ids = np.asarray(dump.array(e.key, step=e.step, call=e.call))
        if ids.size != output[i].numel():
            raise ValueError(f"force_routing: {key} step {steps[n]}: {ids.shape} ids, the router made "
                             f"{tuple(output[i].shape)}: run the same tokens")
        new_ids = torch.as_tensor(ids, device=output[i].device).reshape(output[i].shape).to(output[i].dtype)
        out = list(output)
        out[i] = new_ids
        w = weights(output, new_ids) if weights is not None else _weights(output, new_ids)
        if w is not None:
            out[w[0]] = w[1]
        return tuple(out)
    return hook


def _weights(output, ids):
    """(index, weights) of the float [T, k] element recomputed at ``ids``, or None."""
    import torch

    k = ids.shape[-1]
    floats = [(i, t) for i, t in enumerate(output) if torch.is_tensor(t) and t.is_floating_point()]
    logits = next((t for _, t in floats if t.shape[-1] > k and t.reshape(-1, t.shape[-1]).shape[0] == ids.reshape(-1, k).shape[0]), None)
    w_at = next((i for i, t in floats if t.shape == ids.shape), None)
    if logits is None or w_at is None:
        return None
    old = output[w_at]
    probs = torch.softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)
    w = probs.gather(-1, ids.reshape(-1, k).long())
    if torch.allclose(old.float().reshape(-1, k).sum(-1), torch.ones(1), atol=1e-3):
        w = w / w.sum(-1, keepdim=True)
    return w_at, w.reshape(old.shape).to(old.dtype)

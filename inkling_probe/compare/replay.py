"""Replay: run a candidate module on the reference's recorded inputs and compare its outputs with
the reference's recorded outputs: the module's local error, with no upstream contamination.

The reference must have been recorded with inputs (``record(..., inputs=True)``): positional
inputs are ``KEY.in.0``, ``KEY.in.1``, ..., keyword inputs ``KEY.in.<name>``; outputs ``KEY``
(``KEY.0``, ... for tuples, ``KEY.<field>`` for dicts). Non-tensor arguments are not recorded:
pass them as ``args``/``kwargs`` (they override recorded inputs of the same position or name).

When an output diverges, :func:`search_weight_layouts` tries the layout permutations of
:mod:`.explain.permute` on the module's own parameters: a permutation after which the replayed
output matches names a weight-loading bug (gate/up interleaved vs concatenated, swapped halves).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from inkling_probe.compare.align import entries
from inkling_probe.compare.conform import ShapeMismatch, conform
from inkling_probe.compare.diagnose import call_explain
from inkling_probe.compare.explain import Context, Finding
from inkling_probe.compare.values import as_float64, from_any
from inkling_probe.compare.floor import base_threshold, coarsest
from inkling_probe.compare.metrics import Metrics, compare_tensors
from inkling_probe.errors import DumpError
from inkling_probe.store.reader import as_dump


@dataclass
class ReplayOutput:
    key: str
    metrics: Metrics
    threshold: float
    findings: list = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return self.metrics.error("rel_rms") > self.threshold

    def to_dict(self) -> dict:
        return {"key": self.key, "diverged": self.diverged, "threshold": self.threshold,
                "metrics": self.metrics.to_dict(), "findings": [f.to_dict() for f in self.findings]}


@dataclass
class ReplayResult:
    key: str
    step: int
    outputs: list[ReplayOutput]
    missing: list[str]  # replayed outputs the reference lacks
    layout: Finding | None = None  # a weight permutation that explains the divergence

    @property
    def diverged(self) -> bool:
        return any(o.diverged for o in self.outputs)

    def to_dict(self) -> dict:
        return {"key": self.key, "step": self.step, "diverged": self.diverged,
                "outputs": [o.to_dict() for o in self.outputs], "missing": self.missing,
                "layout": self.layout.to_dict() if self.layout else None}


def recorded_inputs(dump, key: str, step: int = 0, call: int = 0, name_map=None):
    """(args, kwargs) of ``key`` as recorded in ``dump`` (tensors only)."""
    ents = {k: e for k, e in entries(dump, name_map).items() if k[1] == step and k[2] == call}
    prefix = key + ".in."
    pos, kw = {}, {}
    for (k, _, _), e in ents.items():
        if not k.startswith(prefix):
            continue
        name = k[len(prefix):]
        if "." in name:
            raise DumpError(f"{dump.path}: input {k!r} is nested; pass the arguments explicitly (args=, kwargs=)")
        t = dump.tensor(e.key, step=step, call=call)
        (pos if name.isdigit() else kw)[int(name) if name.isdigit() else name] = t
    if sorted(pos) != list(range(len(pos))):
        raise DumpError(f"{dump.path}: inputs of {key!r} have gaps: positions {sorted(pos)}")
    return [pos[i] for i in range(len(pos))], kw


def _outputs(out, key: str) -> list[tuple[str, torch.Tensor]]:
    from inkling_probe.hooks import flatten

    return list(flatten(out, key))


def run_module(module, args, kwargs):
    with torch.no_grad():
        return module(*args, **kwargs)


def replay(module: torch.nn.Module, dump, key: str, *, step: int = 0, call: int = 0, name_map=None,
           args=None, kwargs=None, threshold: float | None = None, search_layouts: bool = True) -> ReplayResult:
    """Run ``module`` on ``dump``'s recorded inputs of ``key`` and compare with its recorded outputs.

    ``dump`` is a path or an open dump; ``threshold`` replaces the dtype default (depth 0).
    """
    opened = as_dump(dump)
    try:
        return _replay(module, opened, key, step, call, name_map, args, kwargs, threshold, search_layouts)
    finally:
        if opened is not dump:
            opened.close()


def _replay(module, dump, key, step, call, name_map, args, kwargs, threshold, search_layouts) -> ReplayResult:
    rec_args, rec_kwargs = recorded_inputs(dump, key, step, call, name_map)
    args = list(args) if args is not None else []
    args = args + rec_args[len(args):] if len(args) < len(rec_args) else args
    kwargs = {**rec_kwargs, **(kwargs or {})}
    if not args and not kwargs:
        raise DumpError(f"{dump.path}: no recorded inputs for {key!r} (record with inputs=True: {key}.in.0 ...)")
    params = [p.dtype for p in module.parameters()][:1]
    args = [_like(a, params) for a in args]
    kwargs = {k: _like(v, params) for k, v in kwargs.items()}
    ref = {k: e for (k, s, c), e in entries(dump, name_map).items() if s == step and c == call}
    outs, missing = [], []
    for out_key, t in _outputs(run_module(module, args, kwargs), key):
        if out_key not in ref:
            missing.append(out_key)
            continue
        r = dump.tensor(ref[out_key].key, step=step, call=call)
        outs.append(_compare_one(out_key, r, t, ref[out_key].first, threshold))
    result = ReplayResult(key, step, outs, missing)
    if search_layouts and result.diverged:
        target = next(o for o in outs if o.diverged)
        r = dump.tensor(ref[target.key].key, step=step, call=call)
        result.layout = search_weight_layouts(module, args, kwargs, target.key, key, r, target.threshold)
    return result


def _like(x, param_dtypes):
    """Float inputs in the module's parameter dtype (a bf16 module replayed on fp32 inputs)."""
    if isinstance(x, torch.Tensor) and x.is_floating_point() and param_dtypes and param_dtypes[0].is_floating_point:
        return x.to(param_dtypes[0]) if x.dtype.itemsize >= 2 else x
    return x


def _compare_one(out_key, r, t, row, threshold) -> ReplayOutput:
    try:
        conf = conform(from_any(r), from_any(t), row, None)
    except ShapeMismatch as e:
        raise DumpError(f"replayed {out_key!r}: {e}") from None
    thr = threshold if threshold is not None else base_threshold(coarsest(r.dtype, t.dtype))
    m = compare_tensors(conf.ref, conf.cand)
    findings = call_explain(as_float64(conf.ref), as_float64(conf.cand),
                            Context(noise=thr, token_dim=conf.token_dim)) if m.error() > thr else []
    return ReplayOutput(out_key, m, thr, findings)


def interleaved_to_concat(c: torch.Tensor, d: int) -> torch.Tensor:
    n = c.shape[d]
    return c.index_select(d, torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)]))


def concat_to_interleaved(c: torch.Tensor, d: int) -> torch.Tensor:
    n = c.shape[d]
    return c.index_select(d, torch.stack([torch.arange(n // 2), torch.arange(n // 2) + n // 2], dim=1).reshape(-1))


def swap_halves(c: torch.Tensor, d: int) -> torch.Tensor:
    return torch.cat(c.chunk(2, dim=d)[::-1], dim=d)


_LAYOUTS = {
    "interleaved_as_concat": ("the module's {p} rows went through an extra interleave ([a; b] -> [a0, b0, a1, b1, "
                              "...], dim {d}): rows already interleaved [g0, u0, ...] were treated as "
                              "concatenated [gate; up]", interleaved_to_concat),
    "concat_as_interleaved": ("the module's {p} rows went through an extra de-interleave ([a0, b0, ...] -> [a; b], "
                              "dim {d}): concatenated [gate; up] rows were treated as interleaved",
                              concat_to_interleaved),
    "swapped_halves": ("the module's {p} has its halves swapped along dim {d}", swap_halves),
}


def search_weight_layouts(module, args, kwargs, out_key, key, ref_out, noise) -> Finding | None:
    """The first parameter layout permutation after which the module's output matches ``ref_out``."""
    params = dict(module.named_parameters())
    for name, p in params.items():
        companions = [n for n, q in params.items() if n != name and n.startswith(name + "_")]
        for d in range(p.dim()):
            if p.shape[d] < 4 or p.shape[d] % 2:
                continue
            for perm, (text, fn) in _LAYOUTS.items():
                group = [name] + [n for n in companions if params[n].dim() > d and params[n].shape[d] == p.shape[d]]
                residual = _try(module, params, group, d, fn, args, kwargs, out_key, key, ref_out)
                if residual is not None and residual <= noise:
                    return Finding("weight_layout", text.format(p=name, d=d) + f": undoing it brings {out_key} "
                                   f"to rel_rms {residual:.3g}",
                                   {"parameter": name, "with": group[1:], "permutation": perm, "dim": d,
                                    "residual_rel_rms": residual})
    return None


def _try(module, params, group, d, fn, args, kwargs, out_key, key, ref_out):
    saved = {n: params[n].data for n in group}
    try:
        for n in group:
            params[n].data = fn(saved[n], d).contiguous()
        outs = dict(_outputs(run_module(module, args, kwargs), key))
        if out_key not in outs:
            return None
        conf = conform(from_any(ref_out), from_any(outs[out_key]))
        return compare_tensors(conf.ref, conf.cand).rel_rms
    except (RuntimeError, ShapeMismatch, ValueError):
        return None
    finally:
        for n in group:
            params[n].data = saved[n]

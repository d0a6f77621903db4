"""An input read in another order: the module computed its function on a reordering of its input's
axes (a space-to-depth fold or a flatten in another order, a transposed patch, a flipped axis).

Read from the culprit's recorded input ``x`` ([rows, ...], :mod:`.recorded`) and the per-row errors
of the output: for a reordering ``T`` of the input's own axes (two equal-length axes swapped, one
axis reversed), a row whose input ``T`` leaves unchanged (``T(x_t) == x_t``) must come out exact and,
whatever the module is, a row whose input ``T`` changes will in general come out changed. The
hypothesis holds for ``T`` when the exact rows are exactly the rows ``T`` leaves unchanged; it is
evidence only when the exact rows are not symmetric under everything (some other reordering, e.g. of
another axis, would change one of them: a constant or zero row says nothing). Where ``T`` maps one
row's input onto another's (``T(x_t) == x_u``), the candidate's row t must equal the reference's row
u: a check that separates transforms when the data has such pairs (the confirmed ones are kept
alone). Reorderings that touch an axis
along which every row is constant are dropped when one without it splits the rows the same way.
Cost: one pass over the input per reordering (inputs up to ``recorded.MAX_INPUT`` elements).
"""
from __future__ import annotations

import itertools

import numpy as np

from inkling_probe.compare.explain.base import Finding, short_list
from inkling_probe.compare.explain.blocks import f64, rel_of
from inkling_probe.compare.explain.pair import Pair
from inkling_probe.compare.explain.recorded import row_inputs, split_rows


def reordered_input(p: Pair) -> Finding | None:
    """The hypothesis (module docstring) for the first recorded input it holds for, or None."""
    split = split_rows(p)
    if split is None or not split[0].size or not split[1].size:
        return None
    for name, x in row_inputs(p):
        f = _one(p, name, x, *split)
        if f is not None:
            return f
    return None


def _transforms(x: np.ndarray):
    """(label, dims touched, function of x) for each reordering of the row's own axes (dims 1..)."""
    dims = [d for d in range(1, x.ndim) if x.shape[d] >= 2]
    for a, b in itertools.combinations(dims, 2):
        if x.shape[a] == x.shape[b]:
            yield f"dims {a}<->{b} swapped", (a, b), lambda v, a=a, b=b: np.swapaxes(v, a, b)
    for a in dims:
        yield f"dim {a} reversed", (a,), lambda v, a=a: np.flip(v, a)


def _one(p: Pair, name: str, x: np.ndarray, exact: np.ndarray, changed: np.ndarray) -> Finding | None:
    n = x.shape[0]
    flat = x.reshape(n, -1)
    const_dims = {d for d in range(1, x.ndim) if (x == x.take([0], axis=d)).all()}  # no row varies along d
    consistent, rejected_by_exact = [], False
    for label, dims, fn in _transforms(x):
        tx = np.ascontiguousarray(fn(x))
        inv = (tx.reshape(n, -1) == flat).all(axis=1)  # [rows] unchanged by the reordering
        if not inv[exact].all():
            rejected_by_exact = True
            continue
        if inv[changed].any():
            continue
        pairs = _pairs(p, flat, tx.reshape(n, -1))
        if pairs is not None:
            consistent.append((label, dims, inv, pairs))
    if not consistent or not rejected_by_exact:
        return None
    consistent = _drop_constant_dims(consistent, const_dims)
    if any(c[3] for c in consistent):  # a reordering that pairs rows up and was confirmed beats one untested
        consistent = [c for c in consistent if c[3]]
    dims = sorted({d for _, ds, _, _ in consistent for d in ds})
    labels = [c[0] for c in consistent]
    confirmed = sum(c[3] for c in consistent)
    ev = {"input": name, "input_shape": list(x.shape), "dims": dims, "transforms": labels,
          "rows": changed.tolist(), "exact_rows": exact.tolist(), "pairs_confirmed": confirmed}
    which = labels[0] if len(labels) == 1 else f"dims {tuple(dims)} (consistent with: {', '.join(labels)})"
    return Finding("reordered_input",
                   f"input {name} read in another order: {which}: rows {short_list(changed.tolist())} changed, "
                   f"the {exact.size} exact rows are exactly those whose input the reordering leaves unchanged "
                   f"(input {list(x.shape)}; e.g. a space-to-depth fold or a flatten in another order)", ev,
                   kind="permutation")


def _pairs(p: Pair, flat: np.ndarray, tflat: np.ndarray) -> int | None:
    """Rows t whose reordered input is another row u's input: count of c_t == r_u (None if one fails)."""
    where = {flat[u].tobytes(): u for u in range(flat.shape[0])}
    ok = 0
    for t in range(flat.shape[0]):
        u = where.get(tflat[t].tobytes())
        if u is None or u == t:
            continue
        rt, ct = f64(np.take(p.r, [u], axis=p.row_dim)), f64(np.take(p.c, [t], axis=p.row_dim))
        d = ct - rt
        if rel_of(float((d * d).sum()), float((rt * rt).sum())) > p.noise:
            return None
        ok += 1
    return ok


def _drop_constant_dims(found: list, const_dims: set) -> list:
    """Drop a reordering touching a dim no row varies along when another splits the rows alike."""
    clean = [c for c in found if not const_dims & set(c[1])]
    return clean + [c for c in found if const_dims & set(c[1]) and not any((o[2] == c[2]).all() for o in clean)]

"""An input read in another order: the module computed its function on a reordering of its input's
axes (a space-to-depth fold or a flatten in another order, a transposed patch, a flipped axis).

Read from the culprit's recorded input ``x`` ([rows, ...], :mod:`.recorded`) and the errors of the
output, unit by unit. A unit is a row, or, when the output keeps a grid that coarsens the input's
(``x [rows, g1*f1, ..., gk*fk, C]``, output ``[rows, g1, ..., gk, D]``: each output position computed
from one ``f1 x ... x fk`` block, as a space-to-depth fold does), an output position with its input
block. For a reordering ``T`` of the unit input's own axes (two equal-length axes swapped, one axis
reversed), a unit whose input ``T`` leaves unchanged (``T(x_u) == x_u``) must come out exact and,
whatever the module is, a unit whose input ``T`` changes will in general come out changed. The
hypothesis holds for ``T`` when the exact units are exactly the units ``T`` leaves unchanged; it is
evidence only when the exact units are not symmetric under everything (some other reordering, e.g.
of another axis, would change one of them: a constant or zero input says nothing). Where ``T`` maps
one unit's input onto another's (``T(x_u) == x_v``), the candidate's unit u must equal the
reference's unit v: a check that separates transforms when the data has such pairs (the confirmed
ones are kept alone). Reorderings that touch an axis along which no unit varies are dropped when one
without it splits the units the same way. When every exact unit's input is constant along the dims
the reorderings touch (the padding, typically) and no pair confirmed one, the evidence is only that
the fault spared those inputs, which any fault sparing the padding does too: the finding says so
(evidence ``weak``) rather than claiming the order alone. Cost: one pass over the pair (float64 a block at a time)
and one over the input per reordering (both up to ``recorded.MAX_INPUT`` elements).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from inkling_probe.compare.explain.base import Finding, short_list
from inkling_probe.compare.explain.blocks import f64
from inkling_probe.compare.explain.pair import Pair
from inkling_probe.compare.explain.recorded import MARGIN, MAX_INPUT, row_inputs

CHUNK = 1 << 19  # elements converted to float64 at a time


def reordered_input(p: Pair) -> Finding | None:
    """The hypothesis (module docstring) for the first recorded input it holds for, or None."""
    if p.row_dim is None or p.r.size > MAX_INPUT or p.r.ndim < 2:
        return None
    for name, x in row_inputs(p):
        for view in (_grid_view(p, x), _row_view(p, x)):
            f = _one(p, name, x.shape, *view) if view is not None else None
            if f is not None:
                return f
    return None


def _row_view(p: Pair, x: np.ndarray):
    """(unit inputs [rows, ...], ref [rows, F], cand [rows, F], grid None): one unit per row."""
    r, c = (np.moveaxis(v, p.row_dim, 0).reshape(x.shape[0], -1) for v in (p.r, p.c))
    return x, r, c, None


def _grid_view(p: Pair, x: np.ndarray):
    """The unit view of an output grid coarsening the input's (module docstring), or None."""
    r = np.moveaxis(p.r, p.row_dim, 0)
    if x.ndim != r.ndim or x.ndim < 3:
        return None
    grid, inner = r.shape[1:-1], x.shape[1:-1]
    if any(g < 1 or n % g for g, n in zip(grid, inner)) or math.prod(grid) == 1:
        return None
    f = [n // g for g, n in zip(grid, inner)]
    k = len(grid)
    xb = x.reshape((x.shape[0],) + tuple(v for gf in zip(grid, f) for v in gf) + (x.shape[-1],))
    order = [0] + [1 + 2 * i for i in range(k)] + [2 + 2 * i for i in range(k)] + [2 * k + 1]
    units = xb.transpose(order).reshape((-1,) + tuple(f) + (x.shape[-1],))  # [rows * grid, f1..fk, C]
    rr, cc = (np.moveaxis(v, p.row_dim, 0).reshape(units.shape[0], -1) for v in (p.r, p.c))
    return units, rr, cc, f


def _split(r: np.ndarray, c: np.ndarray, noise: float):
    """(exact units, changed units) by each unit's own error; None when one lies in between."""
    rr, dd = np.empty(r.shape[0]), np.empty(r.shape[0])
    step = max(1, CHUNK // max(r.shape[1], 1))
    for a in range(0, r.shape[0], step):  # float64 a few MiB at a time
        rb, cb = f64(r[a:a + step]), f64(c[a:a + step])
        rr[a:a + step], dd[a:a + step] = (rb * rb).sum(1), ((cb - rb) ** 2).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(rr > 0, np.sqrt(dd / np.where(rr > 0, rr, 1.0)), np.where(dd > 0, np.inf, 0.0))
    tol = max(noise, 1e-12)
    exact, changed = np.flatnonzero(e <= tol), np.flatnonzero(e > MARGIN * tol)
    return (exact, changed) if exact.size + changed.size == e.size else None


def _transforms(x: np.ndarray):
    """(label, dims touched, function of x) for each reordering of the unit's own axes (dims 1..)."""
    dims = [d for d in range(1, x.ndim) if x.shape[d] >= 2]
    for a, b in itertools.combinations(dims, 2):
        if x.shape[a] == x.shape[b]:
            yield f"dims {a}<->{b} swapped", (a, b), lambda v, a=a, b=b: np.swapaxes(v, a, b)
    for a in dims:
        yield f"dim {a} reversed", (a,), lambda v, a=a: np.flip(v, a)


def _one(p: Pair, name: str, shape: tuple, x: np.ndarray, r: np.ndarray, c: np.ndarray, block) -> Finding | None:
    split = _split(r, c, p.noise)
    if split is None or not split[0].size or not split[1].size:
        return None
    exact, changed = split
    n = x.shape[0]
    flat = x.reshape(n, -1)
    const_dims = {d for d in range(1, x.ndim) if (x == x.take([0], axis=d)).all()}  # no unit varies along d
    consistent, rejected_by_exact = [], False
    for label, dims, fn in _transforms(x):
        tx = np.ascontiguousarray(fn(x)).reshape(n, -1)
        inv = (tx == flat).all(axis=1)  # [units] unchanged by the reordering
        if not inv[exact].all():
            rejected_by_exact = True
            continue
        if inv[changed].any():
            continue
        pairs = _pairs(p.noise, flat, tx, r, c)
        if pairs is not None:
            consistent.append((label, dims, inv, pairs))
    if not consistent or not rejected_by_exact:
        return None
    consistent = _drop_constant_dims(consistent, const_dims)
    if any(t[3] for t in consistent):  # a reordering that pairs units up and was confirmed beats one untested
        consistent = [t for t in consistent if t[3]]
    return _finding(name, shape, block, consistent, exact, changed, x)


def _only_constant(xe: np.ndarray, dims: list) -> bool:
    """Is every exact unit's input ``xe [units, ...]`` constant along each of ``dims``?"""
    return all((xe == xe.take([0], axis=d)).all() for d in dims)


def _finding(name, shape, block, consistent, exact, changed, x) -> Finding:
    n = x.shape[0]
    dims = sorted({d for _, ds, _, _ in consistent for d in ds})
    confirmed = sum(t[3] for t in consistent)
    weak = not confirmed and _only_constant(x[exact], dims)
    hedge = (f"; but every exact {'row' if block is None else 'position'}'s input is constant along dims "
             f"{tuple(dims)} (e.g. padding): any fault that spares such inputs fits this as well") if weak else ""
    labels = [t[0] for t in consistent]
    per = n // shape[0]
    rows = sorted({int(u) // per for u in changed})  # the token rows holding a changed unit
    where = "" if block is None else f" within each {'x'.join(map(str, block))} block (one per output position)"
    which = labels[0] if len(labels) == 1 else f"dims {tuple(dims)} (consistent with: {', '.join(labels)})"
    unit = "rows" if block is None else "positions"
    ev = {"input": name, "input_shape": list(shape), "dims": dims, "transforms": labels, "block": block,
          "rows": rows, "exact": exact[:64].tolist(), "changed_units": int(changed.size), "exact_units": int(exact.size),
          "units": n,
          "pairs_confirmed": confirmed, "weak": weak}
    return Finding("reordered_input",
                   f"input {name} read in another order{where}: {which}: rows {short_list(rows)} changed; the "
                   f"{exact.size} exact {unit} of {n} are exactly those whose input the reordering leaves unchanged "
                   f"(input {list(shape)}; e.g. a space-to-depth fold or a flatten in another order){hedge}", ev,
                   kind="permutation")


def _pairs(noise: float, flat: np.ndarray, tflat: np.ndarray, r: np.ndarray, c: np.ndarray) -> int | None:
    """Units u whose reordered input is another unit v's input: count of c_u == r_v (None if one fails)."""
    where = {flat[v].tobytes(): v for v in range(flat.shape[0])}
    ok = 0
    for u in range(flat.shape[0]):
        v = where.get(tflat[u].tobytes())
        if v is None or v == u or (flat[v] == flat[u]).all():
            continue
        rv, cu = f64(r[v]), f64(c[u])
        if np.sqrt(((cu - rv) ** 2).sum() / max((rv * rv).sum(), 1e-300)) > noise:
            return None
        ok += 1
    return ok


def _drop_constant_dims(found: list, const_dims: set) -> list:
    """Drop a reordering touching a dim no unit varies along when another splits the units alike."""
    clean = [t for t in found if not const_dims & set(t[1])]
    return clean + [t for t in found if const_dims & set(t[1]) and not any((o[2] == t[2]).all() for o in clean)]

"""Rows set aside on both sides after the same changed decisions: judged against the control's own.

A changed decision's token rows are set aside in the keys after it (compare/reach.py): their values
are another computation's. But where the control changed the same decisions on the same token (the
same new ids at every decision of the step so far), the candidate's row and the control's row are
the same computation path, and the control's error on that row is exactly the floor the candidate's
error there should be judged against. A correct run used as its own control (or a control of the
same precision that makes the same near-tie picks) then leaves nothing unchecked, while a fault on
those rows still shows: it moves the candidate's row and not the control's.

:func:`same_decision_rows` finds those rows; the judge scores them (:meth:`.judge.Judge.value`'s
``shared``). Only routing decisions of the key's own step count; a row set aside after a different
decoded token is never shared (the two sides may have decoded different other tokens).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inkling_probe.compare.side import Side


@dataclass
class SharedRows:
    """Set-aside rows both sides reached by the same decisions: their errors, side by side."""

    rows: list[int]  # token rows
    cand: np.ndarray  # [len(rows)] the candidate's error on each (before it was set aside)
    ctl: np.ndarray  # [len(rows)] the control's


def same_decision_rows(cand: Side, ctl: Side, step: int, m, c, offset: int = 0) -> SharedRows | None:
    """The rows the candidate's measurement ``m`` and the control's ``c`` both set aside after the
    same decisions (module docstring), or None; ``offset``: the token of the key's first row."""
    if c is None or not m.masked or not c.masked or m.masked_errors is None or c.masked_errors is None:
        return None
    if m.token_rows != c.token_rows:
        return None
    token_kind = {f.token for side in (cand, ctl) for f in side.reach.flips if f.step == step and f.kind == "token"}
    ctl_err = dict(zip(c.masked, c.masked_errors))
    keep = [(t, e) for t, e in zip(m.masked, m.masked_errors) if t in ctl_err and t + offset not in token_kind
            and _same_ids(cand, ctl, step, t + offset)]
    if not keep:
        return None
    rows = [t for t, _ in keep]
    return SharedRows(rows, np.array([e for _, e in keep], dtype=np.float64),
                      np.array([ctl_err[t] for t in rows], dtype=np.float64))


def _same_ids(cand: Side, ctl: Side, step: int, token: int) -> bool:
    """Whether token ``token`` took the same ids on both sides at every decision of ``step`` so far."""
    layers = {k for k in (*cand.ids, *ctl.ids, *cand.same_ids, *ctl.same_ids) if k[0] == step}
    if not layers:
        return False
    for k in layers:
        a, b = _ids(cand, k), _ids(ctl, k)
        if a is None or b is None:
            return False
        ref = next((side.ids[k][0] for side in (cand, ctl) if k in side.ids), None)
        a = ref if isinstance(a, str) else a
        b = ref if isinstance(b, str) else b
        if a is None or b is None:  # both equal to the reference: the same ids
            continue
        if a.shape != b.shape or token >= a.shape[0]:
            return False
        if not np.array_equal(np.sort(a[token].reshape(-1)), np.sort(b[token].reshape(-1))):
            return False
    return True


def _ids(side: Side, k):
    """The side's ids ``[T, k]`` at decision ``k``; ``"ref"`` where equal to the reference; None unseen."""
    if k in side.ids:
        return side.ids[k][1]
    if k in side.same_ids:
        return "ref"
    return None

"""What crosses the modality boundary when one modality's rows are judged (``compare --rows KIND``).

A view (compare/modality.py) keeps one modality's token rows; the decoder's token mixing (attention,
the short convs ``attn.k_sconv``/``v_sconv``/``mlp_sconv``, causal) still reads the other rows. An
image or audio fault makes the text rows next to it wrong at the first mixing key, and in the view
their inputs look clean: the mixing key was blamed as a birth (``layers.0.mlp_sconv``,
``layers.0.attn.v``). Here each born row of a view is checked against the rows the view left out,
read from the whole stream:

- the left-out rows at its feeders (compare/divergence.py) are off (some row past K_ROW x the
  feeder's allowance), and
- every judged row it is off on comes after the first of them in the stream (causal mixing reaches
  only later rows), and its error there is within SPREAD x the largest left-out row's error at those
  feeders (a mixed row carries at most a convex share of its sources', reach.py's bound).

Then its error is carried across the boundary: the row is not born (a consequence), and a note says
which rows it came from and the first key where they are off. A fault of the judged rows themselves
still is a birth: its rows before the other modality's are off too, or it is larger than the bound.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.compare.judge import K_ROW
from inkling_probe.compare.modality import FUSED, RowsView, _runs, kind_rows, name_rows, tower_kind
from inkling_probe.compare.reach import SPREAD
from inkling_probe.compare.report import Row, join_notes
from inkling_probe.compare.values import Values, as_float64
from inkling_probe.errors import ProbeError


def mark(report, dumps: dict) -> list[Row]:
    """Un-birth the born rows whose error the left-out rows carry (module docstring); returns them."""
    ref, cand = dumps.get("reference"), dumps.get("candidate")
    if not (isinstance(ref, RowsView) and isinstance(cand, RowsView)):
        return []
    b = _Boundary(ref, cand)
    by_step: dict[int, list[Row]] = {}
    for r in report.rows:
        by_step.setdefault(r.step, []).append(r)
    out = []
    for row in [r for r in report.rows if r.born]:
        found = b.carried(row, by_step[row.step])
        if found is None:
            continue
        rows, off, source = found
        spans, n = b.layout(row.step)
        row.born = ""
        row.note = join_notes(row.note, f"carried across the modality boundary: its {ref.kind} rows {_runs(rows)} "
                                        f"read {name_rows(off, spans, n)}, off from {source} on")
        if not out:
            first = (f"{row.key}{' step ' + str(row.step) if row.step else ''}'s {ref.kind} rows {_runs(rows)} "
                     f"mix in {name_rows(off, spans, n)}, off from {source} on")
            others = _kinds_of(off, spans)
        out.append(row)
    if out:
        more = f" ({len(out) - 1} more key row(s) alike, each noted)" if len(out) > 1 else ""
        report.notes.append(f"{ref.kind} rows carry error from the rows --rows {ref.kind} leaves out: {first}: a "
                            f"consequence there, not a birth{more}; judge those rows with --rows {others}")
    return out


def _kinds_of(rows: list[int], spans: list) -> str:
    """The modalities of stream rows, as --rows takes them ("image|audio")."""
    media = {r: s[0] for s in spans for r in range(s[2], s[2] + s[3])}
    got = {media.get(r, "text") for r in rows}
    return "|".join(k for k in ("text", "image", "audio") if k in got)


class _Boundary:
    """Per-row errors of the judged rows and of the left-out rows, read once per key."""

    def __init__(self, ref: RowsView, cand: RowsView):
        self.ref, self.cand, self.kind = ref, cand, ref.kind
        self._errs: dict = {}

    def layout(self, step: int):
        return self.ref.layout_of(step) or self.cand.layout_of(step)

    def carried(self, row: Row, step_rows: list[Row]):
        """(the judged rows it is off on, the left-out rows off at its feeders, the first key where the
        left-out rows are off) when the row's error is carried across the boundary, else None."""
        if tower_kind(row.key) is not None or row.key == FUSED:
            return None
        at = self.errors(row)
        if at is None:
            return None
        mine, _, pos_mine, _ = at
        bad = [i for i in (row.bad_rows or []) if i < len(mine)] or \
            [i for i in range(len(mine)) if mine[i] > row.threshold]
        if not bad:
            return None
        before = step_rows[:next((i for i, r in enumerate(step_rows) if r is row), len(step_rows))]
        names = set(row.feeders)
        carried, off = 0.0, set()
        for f in before:
            if f.key not in names:
                continue
            got = self.off(f)
            if got:
                rows, worst = got
                off |= rows
                carried = max(carried, worst)
        if not off:
            return None
        first = min(off)
        if any(pos_mine[i] <= first for i in bad) or max(mine[i] for i in bad) > SPREAD * carried:
            return None
        source = next((f.key for f in before if self.off(f)), None)
        return [int(pos_mine[i]) for i in bad], sorted(off), source

    def off(self, row: Row):
        """(stream rows of the left-out ones over K_ROW x the row's allowance, their largest error), or None."""
        at = self.errors(row)
        if at is None or row.threshold <= 0:
            return None
        _, other, _, pos_other = at
        over = other > K_ROW * row.threshold
        if not over.any():
            return None
        return {int(p) for p in pos_other[over]}, float(other[over].max())

    def errors(self, row: Row):
        """(e_i of the judged rows, e_i of the left-out rows, their stream rows in the reference) at a
        row of the view, or None where the stream can't be read or the two layouts differ."""
        ident = (row.key, row.step, row.call)
        if ident not in self._errs:
            self._errs[ident] = self._read(row)
        return self._errs[ident]

    def _read(self, row: Row):
        lr, lc = self.ref.layout_of(row.step), self.cand.layout_of(row.step)
        if lr is None or lc is None or lr[1] != lc[1]:
            return None
        try:
            r, c = self.ref.stream(row.ref_key, row.step, row.call), self.cand.stream(row.cand_key, row.step, row.call)
        except (ProbeError, ValueError, KeyError):
            return None
        if r is None or c is None or r[0].size != c[0].size:
            return None
        n = lr[1]
        arrays = []
        for (a, d), dtype in ((r, row.ref_dtype), (c, row.cand_dtype)):
            if d is None or d >= a.ndim or a.shape[d] != n:
                return None  # each side its own layout ([1, T, D] and [T, D]): token rows first
            arrays.append(np.moveaxis(as_float64(Values(a, dtype)), d, 0).reshape(n, -1))
        ra, ca = arrays
        mr, mc = kind_rows(self.kind, *lr), kind_rows(self.kind, *lc)
        orr = [i for i in range(n) if i not in set(mr)]
        oc = [i for i in range(n) if i not in set(mc)]
        if len(mr) != len(mc) or len(orr) != len(oc):
            return None

        def e(a, b):
            with np.errstate(invalid="ignore", divide="ignore"):
                num = np.linalg.norm(b - a, axis=1)
                den = np.linalg.norm(a, axis=1)
                return np.where(den > 0, num / np.maximum(den, 1e-300), np.where(num > 0, np.inf, 0.0))
        return e(ra[mr], ca[mc]), e(ra[orr], ca[oc]), np.asarray(mr), np.asarray(orr)

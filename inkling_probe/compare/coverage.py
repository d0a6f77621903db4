"""Coverage: how much of a key was judged, and why the rest was not. Part of every verdict.

Every row of a report carries ``rows_recorded`` (the reference's token rows at the key; 1 for a key
without a token dim), ``rows_judged`` and ``not_judged`` (reason -> rows): ``set aside`` (a changed
decision's own token after it, compare/reach.py), ``not comparable`` (the whole key),
``unreadable``, ``missing`` (rows one side does not hold: a prefix or an overlap of token slices).

A key with at least ``FAULT_ROWS`` of its rows set aside, not comparable or unreadable could hide a
fault of the documented size (one reaching a quarter of a key's token rows: compare judges each row,
so such a fault shows on any of its rows that is judged). Its status is then ``unchecked``, never
``exact``/``ok``, and unless it is downstream of a found culprit the exit status is 1. Missing rows
are reported but do not make a key unchecked: the rows both sides hold are what was asked for.
"""
from __future__ import annotations

FAULT_ROWS = 0.25
REASONS = ("set aside", "not comparable", "unreadable", "missing")


def cover(row, recorded: int | None, compared: int | None, aside: int = 0, whole: str = "",
          share: tuple | None = None) -> None:
    """Fill the row's coverage. ``compared``: rows both sides hold (None: as recorded); ``whole``: a
    reason that no row was judged (not comparable, unreadable); ``share``: ``(aside, compared)`` over
    the whole key when one key's rows are split over calls (per-expert calls, compare/experts.py):
    the unchecked test is then taken on the key, not on one call's few rows."""
    recorded = max(int(recorded or 1), 1)
    compared = recorded if compared is None else min(int(compared), recorded)
    if whole:
        row.rows_recorded, row.rows_judged, row.not_judged, row.rows_loose = recorded, 0, {whole: recorded}, 0
        return
    reasons = {"set aside": int(aside), "missing": recorded - compared}
    row.rows_recorded = recorded
    row.rows_judged = max(compared - int(aside), 0)
    row.rows_loose = min(row.rows_loose, row.rows_judged)
    row.not_judged = {k: v for k, v in reasons.items() if v}
    a, n = share if share is not None else (aside, compared)
    if row.status in ("exact", "ok") and a and a >= FAULT_ROWS * n:
        row.status = "unchecked"
        row.note = _join(row.note, f"unchecked: {a} of {n} token row(s) set aside after a changed "
                                   f"decision (a fault on them would not show)")


def summary(rows) -> dict:
    """``{"rows_recorded", "rows_judged", "rows_loose", "keys_loose", "not_judged": {reason: rows},
    "keys_unchecked"}`` over rows: judged rows are tight or loose (judge.LOOSE), the rest unchecked."""
    rec = judged = loose = keys_loose = 0
    why: dict = {}
    for r in rows:
        if r.rows_recorded is None:
            continue
        rec += r.rows_recorded
        judged += r.rows_judged
        loose += r.rows_loose
        keys_loose += bool(r.rows_loose)
        for k, v in r.not_judged.items():
            why[k] = why.get(k, 0) + v
    return {"rows_recorded": rec, "rows_judged": judged, "rows_loose": loose, "keys_loose": keys_loose,
            "not_judged": why,
            "keys_unchecked": sum(1 for r in rows if r.status == "unchecked")}


def line(rows) -> str:
    """One line: ``judged 1203 of 1240 token rows (37 set aside after a changed decision)``."""
    s = summary(rows)
    if not s["rows_recorded"]:
        return "no rows judged"
    parts = [f"{v} {k}" for k, v in s["not_judged"].items()]
    pct = 100.0 * s["rows_judged"] / s["rows_recorded"]
    loose = f", {s['rows_loose']} of them loosely" if s["rows_loose"] else ""
    return (f"judged {s['rows_judged']} of {s['rows_recorded']} key rows ({pct:.1f}%{loose})"
            + (f"; not judged: {', '.join(parts)}" if parts else ""))


def _join(a: str, b: str) -> str:
    return "; ".join(x for x in (a, b) if x)

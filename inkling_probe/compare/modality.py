"""Modalities in compare: which token rows are text, image (which image, which patch) or audio
(which clip, which frame), read from the dump; divergences named by modality; one modality judged.

A multimodal run records the fused stream (``fused``) with meta ``media``:
``[[kind, item, first row, rows], ...]`` (every other row is text). From it:

- :func:`name_rows` turns row numbers into "image 0's rows [3..14] (patches 0-11)";
- :func:`split_line` says which side of the fusion was born dirty, the bring-up's split in one line:
  "vision tower clean, fused stream clean, born in the decoder at layers.3.mlp.experts";
- :func:`view` presents a dump restricted to one modality's rows (``compare --rows text|image|audio``):
  keys with a token dim of the fused stream's length keep those rows only, tower keys of the other
  modalities and keys without such a dim are left out, and index hashes are dropped (no shortcut on
  the whole tensor). Each side uses its own layout, so an image at another position in the prompt
  aligns by modality rows.

numpy only; nothing here imports the model.
"""
from __future__ import annotations

import numpy as np

from inkling_probe.errors import ProbeError
from inkling_probe.store.dump import Dump

FUSED = "fused"
KINDS = ("text", "image", "audio")
TOWERS = {"image": ("vision.",), "audio": ("audio.",)}
TOWER_NAMES = {"image": "vision tower", "audio": "audio tower"}
ROW_FINDINGS = {  # explain findings whose evidence names rows: what compare prints after the rows, from the evidence
    "reordered_input": lambda ev: f"changed, input {ev.get('input')} read in another order along dims "
                                  f"{tuple(ev.get('dims') or ())} (the exact ones: those the reordering leaves unchanged"
                                  + ("; only inputs constant along those dims stayed exact, so a fault sparing the "
                                     "padding fits too)" if ev.get("weak") else ")"),
    "positionless_lookup": lambda ev: f"a lookup of input {ev.get('input')} that ignores the position "
                                      "(e.g. per-position codebook offsets dropped)",
}


def layout(dump: Dump, step: int = 0) -> tuple[list, int] | None:
    """(media spans, token rows) of ``step`` from the ``fused`` key's meta, or None."""
    try:
        rows = dump.rows(FUSED, step)
    except (ProbeError, KeyError):
        return None
    meta = rows[0].get("meta") or {}
    if "media" not in meta:
        return None
    shape = rows[0]["shape"]
    return [list(s) for s in meta["media"]], int(shape[rows[0].get("token_dim", 0) or 0])


def tower_kind(key: str) -> str | None:
    """"image" for vision tower keys, "audio" for audio tower keys, else None."""
    for kind, prefixes in TOWERS.items():
        if key.startswith(prefixes):
            return kind
    return None


def kind_rows(kind: str, spans: list, n: int) -> list[int]:
    """The token rows of modality ``kind`` (text: every row no media span holds)."""
    media = {r for s in spans for r in range(s[2], s[2] + s[3])}
    if kind == "text":
        return [r for r in range(n) if r not in media]
    return sorted(r for s in spans if s[0] == kind for r in range(s[2], s[2] + s[3]))


def _runs(rows: list[int]) -> str:
    out, start = [], None
    for i, r in enumerate(rows):
        if start is None:
            start = r
        if i + 1 == len(rows) or rows[i + 1] != r + 1:
            out.append(f"{start}..{r}" if r > start else f"{r}")
            start = None
    return "[" + ", ".join(out) + "]"


def name_rows(rows: list[int], spans: list, n: int | None = None, key: str = "") -> str:
    """Rows named by modality: "image 0's rows [3..14] (patches 0..11), text rows [1]".

    For a tower key (``vision.*``/``audio.*``) the rows are that tower's patches / frames."""
    kind = tower_kind(key)
    parts = []
    if kind is not None:  # tower rows count the modality's items back to back
        base = 0
        for s in [s for s in spans if s[0] == kind]:
            mine = [r - base for r in rows if base <= r < base + s[3]]
            if mine:
                unit = "patches" if kind == "image" else "frames"
                parts.append(f"{kind} {s[1]}'s {unit} {_runs(mine)}")
            base += s[3]
        return ", ".join(parts) or f"rows {_runs(rows)}"
    media = set()
    for s in spans:
        mine = [r for r in rows if s[2] <= r < s[2] + s[3]]
        media.update(range(s[2], s[2] + s[3]))
        if mine:
            unit = "patches" if s[0] == "image" else "frames"
            parts.append(f"{s[0]} {s[1]}'s rows {_runs(mine)} ({unit} {_runs([r - s[2] for r in mine])})")
    text = [r for r in rows if r not in media]
    if text:
        parts.append(f"text rows {_runs(text)}")
    return ", ".join(parts)


def _diverged(row) -> bool:
    return row.status in ("diverged", "shape", "nonfinite")


def split_line(report, spans: list) -> str | None:
    """Which side was born dirty (towers, fused stream, decoder), from the report's step-0 rows."""
    rows = [r for r in report.rows if r.step == 0]
    if not any(r.key == FUSED for r in rows):
        return None
    parts = []
    kinds = [k for k in ("image", "audio") if any(tower_kind(r.key) == k for r in rows)]  # judged towers only
    for kind in kinds:
        bad = [r for r in rows if tower_kind(r.key) == kind and _diverged(r)]
        parts.append(f"{TOWER_NAMES[kind]} clean" if not bad else f"born in the {TOWER_NAMES[kind]} at {bad[0].key}")
        if bad:
            return ", ".join(parts)
    fused = next(r for r in rows if r.key == FUSED)
    if _diverged(fused):
        return ", ".join(parts + [f"born at the fusion ({FUSED})"])
    parts.append("fused stream clean")
    culprit = report.culprit
    if culprit is None:  # a view's rows can diverge by what they mix in from the rows it leaves out (boundary.py)
        return ", ".join(parts + ["decoder diverged, no birth there (see the notes)" if any(_diverged(r) for r in rows)
                                  else "decoder clean"])
    where = "the decoder" if tower_kind(culprit.key) is None else TOWER_NAMES[tower_kind(culprit.key)]
    return ", ".join(parts + [f"born in {where} at {culprit.key}" + (f" step {culprit.step}" if culprit.step else "")])


def lines(report, ref: Dump, cand: Dump, judged: str | None = None) -> list[str]:
    """The modality lines for a report: the split, and each culprit's bad rows named by modality.

    ``judged``: the report compared :func:`view`s of one modality; its row numbers count that
    modality's rows only and are mapped back to the stream's rows here."""
    got = layout(cand) or layout(ref)
    if got is None:
        return []
    spans, n = got
    sel = kind_rows(judged, spans, n) if judged else None

    def back(key: str, rows: list[int]) -> list[int]:
        if sel is None or tower_kind(key) is not None:
            return rows
        return [sel[i] for i in rows if i < len(sel)]

    out = []
    split = split_line(report, spans)
    if split:
        out.append(f"split: {split}")
    for c in report.culprits:
        bad = getattr(c, "bad_rows", None) or []
        if bad and c.step == 0:
            out.append(f"  rows of {c.key}: {name_rows(back(c.key, bad), spans, n, c.key)}")
        for f in report.findings(c.key, c.step) if c.step == 0 else []:
            rows = (f.evidence or {}).get("rows")
            if f.name == "renormalised_rows" and rows:
                out.append(f"  explain {c.key}: {name_rows(back(c.key, rows), spans, n, c.key)} re-normalised: "
                           "each row scaled to unit rms")
            elif f.name in ROW_FINDINGS and rows:
                out.append(f"  explain {c.key}: {name_rows(back(c.key, rows), spans, n, c.key)}: {ROW_FINDINGS[f.name](f.evidence or {})}")
    return out


def to_dict(report, ref: Dump, cand: Dump, judged: str | None = None) -> dict | None:
    """The modality part of compare's JSON: layout and lines (None for a text-only dump)."""
    got = layout(cand) or layout(ref)
    if got is None:
        return None
    return {"media": got[0], "rows": got[1], "lines": lines(report, ref, cand, judged)}


class RowsView(Dump):
    """A dump restricted to one modality's token rows (module docstring). Built by :func:`view`."""

    def _restrict(self, kind: str, spans_of: dict) -> None:
        self._kind, self._select, self._spans_of = kind, {}, spans_of
        keep = []
        for r in self._rows:
            got = spans_of.get(r["step"])
            sel = self._rows_of(r, kind, got)
            if sel is None:
                continue
            d = r.get("token_dim", 0) or 0
            shape = list(r["shape"])
            self._select[(r["key"], r["step"])] = (d, sel)
            shape[d] = len(sel)
            keep.append({**r, "shape": tuple(shape), "hash": "", "numel": int(np.prod(shape))})
        self._rows = keep
        self._by_key = {}
        for r in keep:
            self._by_key.setdefault(r["key"], []).append(r)

    @staticmethod
    def _rows_of(r: dict, kind: str, got) -> np.ndarray | None:
        if got is None:
            return None
        spans, n = got
        tk = tower_kind(r["key"])
        if tk is not None:
            return np.arange(r["shape"][0]) if tk == kind else None
        d = r.get("token_dim", 0)
        if d is None or not r["shape"] or d >= len(r["shape"]) or r["shape"][d] != n:
            return None
        sel = np.asarray(kind_rows(kind, spans, n), dtype=np.int64)
        return sel if sel.size else None

    def _assemble(self, key: str, rows: list[dict]) -> np.ndarray:
        d, sel = self._select[(key, rows[0]["step"])]
        full = [self._orig[(r["key"], r["step"], r["call"], r["rank"])] for r in rows]  # as stored
        return np.take(Dump._assemble(self, key, full), sel, axis=d)

    # -- the whole stream, for what crosses the boundary (compare/boundary.py) -----------------------
    @property
    def kind(self) -> str:
        return self._kind

    def layout_of(self, step: int) -> tuple[list, int] | None:
        """(media spans, stream rows) of ``step`` (this view's own or the other side's)."""
        return self._spans_of.get(step)

    def stream(self, key: str, step: int = 0, call: int = 0) -> tuple[np.ndarray, int] | None:
        """(every stream row of a kept key, its token dim), or None for a key not kept (a tower's)."""
        if (key, step) not in self._select or tower_kind(key) is not None:
            return None
        full = sorted(self._orig_by.get((key, step, call), []), key=lambda r: r["rank"])
        if not full:
            return None
        return Dump._assemble(self, key, full), self._select[(key, step)][0]


def view(dump: Dump, kind: str, fallback: Dump | None = None) -> RowsView:
    """``dump`` restricted to modality ``kind``'s rows (ProbeError when no layout is recorded).

    Compare views with ``jobs=1``: read-ahead workers reopen dumps by path, and a view's path
    (``<path>#rows=<kind>``) names no folder, so they could not read it."""
    if kind not in KINDS:
        raise ProbeError(f"--rows {kind!r}: expected one of {', '.join(KINDS)}")
    steps = sorted({r["step"] for r in dump._rows})
    spans_of = {}
    for s in steps:
        got = layout(dump, s) or (layout(fallback, s) if fallback is not None else None)
        if got is not None:
            spans_of[s] = got
    if not spans_of:
        raise ProbeError(f"{dump.path}: no modality layout (the '{FUSED}' key's media meta of a multimodal run)")
    v = object.__new__(RowsView)
    v.__dict__.update(dump.__dict__)
    v._orig = {(r["key"], r["step"], r["call"], r["rank"]): r for r in dump._rows}
    v._orig_by = {}
    for r in dump._rows:
        v._orig_by.setdefault((r["key"], r["step"], r["call"]), []).append(r)
    v._restrict(kind, spans_of)
    v.path = f"{dump.path}#rows={kind}"
    return v

"""``bisect layers``: the first layer where the candidate leaves the reference, recording one layer a run.

1. One ``stats`` run of the reference and the candidate (index rows only: cheap) gives the probe order, so the layers, and
   each key's NaN/Inf counts: a layer where the candidate turns non-finite and the reference does
   not surely diverges, which bounds the search from above.
2. Binary search over the layers (keys before the first layer count with it, keys after the last
   with the last): each test records one layer's keys in ``full`` mode on every side
   (``INKLING_PROBE_INCLUDE``), with the few keys of the earlier layers that carry compare's state
   (routing decisions and their scores, one key a layer, the precision: ``carry.py``), and compares
   them: each key is judged as the full compare of the same runs judges it. ``ceil(log2(L + 1))``
   tests find the first diverged layer among L, or none: with the stats run at most
   ``ceil(log2 L) + 2`` runs per side.
3. A test compare could not check (inconclusive: no divergence, rows left unchecked) is neither: the
   search sets its layer aside and tests the untested layer nearest the middle instead (``git bisect
   skip``). The answer names a layer only when no such layer lies between the last passing layer and
   the first failing one; "no divergence" only when no test was inconclusive (compare, judging the
   same keys in one run, would not pass them either). Otherwise it lists the inconclusive tests.
It assumes an error, once born, stays visible downstream (the residual stream carries it).
"""
from __future__ import annotations

import math
import re

from inkling_probe.bisect import carry
from inkling_probe.bisect.oracle import (INCONCLUSIVE_EXIT, OracleError, compare_dumps, could_not_check,
                                         dump_problem, outcome, verdict)
from inkling_probe.bisect.trial import FOLDER
from inkling_probe.errors import ProbeError

_LAYER = re.compile(r"^layers\.(\d+)\.")


def units(keys: list[str]) -> list[dict]:
    """Keys in execution order -> ``[{"name", "globs"}]``, one per layer, outer keys folded in."""
    layers = sorted({int(m.group(1)) for k in keys if (m := _LAYER.match(k))})
    if not layers:
        return [{"name": "all", "globs": carry.include_globs(keys)}]
    first_seen = next(i for i, k in enumerate(keys) if _LAYER.match(k))
    head = carry.include_globs([k for k in keys[:first_seen] if not _LAYER.match(k)])
    tail = carry.include_globs([k for k in keys[first_seen:] if not _LAYER.match(k)])
    out = [{"name": f"layers.{i}", "globs": [f"layers.{i}.*"]} for i in layers]
    out[0]["globs"] = head + out[0]["globs"]
    out[-1]["globs"] = out[-1]["globs"] + tail
    return out


def bound(n_layers: int) -> int:
    """The promised runs per side: ceil(log2 L) + 2."""
    return math.ceil(math.log2(max(n_layers, 1))) + 2


class LayerSearch:
    """The search over one bisect's sides (``{"ref": Command, "cand": ..., "control": ...}``)."""

    def __init__(self, runner, sides: dict, compare_options: dict, on_crash: str = "fail"):
        self.runner, self.sides, self.options, self.on_crash = runner, sides, compare_options, on_crash

    def run(self) -> dict:
        stats = self._side_runs("stats", {"INKLING_PROBE_MODE": "stats", "INKLING_PROBE_INCLUDE": None},
                                ("ref", "cand"))
        us = units(self._keys(stats["ref"]))
        self.rows = {side: self._index_rows(rec) for side, rec in stats.items()}
        onset = self._nonfinite_onset(stats, us)
        self.tested: dict[int, dict] = {}
        lo, hi = self._search(us, -1, len(us) if onset is None else onset)
        if hi < len(us) and hi not in self.tested and outcome(self._test_at(us, hi)) == "pass":
            lo, hi = self._search(us, hi, len(us))  # the non-finite bound compared within tolerance
        return self._answer(us, lo, hi, onset)

    def _search(self, us: list[dict], lo: int, hi: int) -> tuple[int, int]:
        """The last passing and the first diverged unit: ``lo`` is assumed to pass (or -1), ``hi`` to
        diverge (or past the end). The unit tested is the untested one nearest the middle: the middle
        itself unless its test was inconclusive; it stops when every unit between is tested."""
        while True:
            mid = (lo + hi) // 2
            left = sorted((i for i in range(lo + 1, hi) if i not in self.tested), key=lambda i: (abs(i - mid), i))
            if not left:
                return lo, hi
            found = outcome(self._test_at(us, left[0]))
            if found != "inconclusive":
                lo, hi = (left[0], hi) if found == "pass" else (lo, left[0])

    def _test_at(self, us: list[dict], i: int) -> dict:
        self.tested[i] = self._test(us[i])
        return self.tested[i]

    def _answer(self, us, lo, hi, onset) -> dict:
        per_side = sum(1 for r in self.runner.state.runs if r["key"].startswith("cand:"))
        unsure = [i for i, v in self.tested.items() if v.get("inconclusive")]
        # an all-clear covers every layer; a found layer depends on those between the bounds (and itself)
        depends = unsure if hi == len(us) else [i for i in unsure if lo < i <= hi]
        found = hi < len(us) and not depends
        v = self.tested.get(hi, {})
        entry = lambda i: {"trial": us[i]["name"], "layer": us[i]["name"],  # noqa: E731
                           "why": self.tested[i].get("why") or "could not check"}
        return {"diverged": found, "layer": us[hi]["name"] if found else None,
                "first_divergence": v.get("first_divergence") if found else None,
                "culprit": v.get("culprit") if found else None,
                "unchecked": v.get("unchecked", []) if found else [],
                "inconclusive": [entry(i) for i in depends],
                "set_aside": [entry(i) for i in unsure if i not in depends],
                "passes_through": us[lo]["name"] if lo >= 0 else None,
                "fails_at": us[hi]["name"] if hi < len(us) and outcome(v) == "fail" else None,
                "layers": len(us), "runs_per_side": per_side, "bound": bound(len(us)),
                "nonfinite_onset": us[onset]["name"] if onset is not None else None}

    # -- runs ------------------------------------------------------------------------------
    def _side_runs(self, tag: str, env: dict, sides=None) -> dict:
        return {side: self.runner.execute(f"{side}:{tag}", f"{side}-{tag}", cmd, env, record=True)
                for side, cmd in self.sides.items() if sides is None or side in sides}

    def _test(self, unit: dict) -> dict:
        env = {"INKLING_PROBE_MODE": "full", "INKLING_PROBE_INCLUDE": ",".join(self._globs(unit))}
        recs = self._side_runs(unit["name"], env)
        key = f"unit:{unit['name']}"
        for r in recs.values():
            r.setdefault("trial", key)  # the verdict each run's row shows (--json)
        v = self.runner.state.verdicts.get(key)
        if v is None:
            v = verdict(self._worst(recs), self._judge(recs), self.on_crash)
            self.runner.settle(list(recs.values()), FOLDER[outcome(v)])
            self.runner.state.set_verdict(key, v)
        if self.runner.first_report(f"verdict:{key}"):
            self.runner.progress("verdict", {"key": key, "label": unit["name"], **v})
        return v

    def _judge(self, recs: dict) -> dict:
        """The candidate's crash is judged by the crash policy (its exit 125: inconclusive); a reference
        or control run that fails leaves nothing to judge against: an error, not a verdict on the candidate."""
        path = {}
        for side in ("ref", "control", "cand"):
            rec = recs.get(side)
            if rec is None:
                continue
            if side == "cand" and rec["exit_code"] == INCONCLUSIVE_EXIT and not rec["crashed"]:
                return could_not_check(rec)
            failed = rec["crashed"] or rec["exit_code"] != 0
            why = rec.get("why") or f"exit code {rec['exit_code']}" if failed else None
            path[side] = self.runner.path(rec)
            why = why or (dump_problem(path[side]) if side != "cand" else None)
            if why and side != "cand":
                raise OracleError(f"the {side} run {rec['label']} cannot be judged against: {why}; "
                                  f"see {rec['dir']}/output.txt")
            if why:
                return {"crashed": True, "why": f"{rec['label']}: {why}"}
        return compare_dumps(path["ref"], path["cand"], path.get("control"), self.options)

    @staticmethod
    def _worst(recs: dict) -> dict:
        return recs["cand"]

    def _globs(self, unit: dict) -> list[str]:
        """The unit's keys, and before them the keys of earlier layers that carry compare's state."""
        if unit["name"] == "all":
            return unit["globs"]
        layer = int(unit["name"].split(".")[1])
        ref = self.rows["ref"]
        cand = self.rows["cand"] or ref  # a failed candidate stats run: choose by the reference's names
        return carry.include_globs(carry.carried(ref, cand, layer)) + unit["globs"]

    # -- the stats runs --------------------------------------------------------------------
    def _index_rows(self, rec: dict) -> list[dict]:
        if rec["crashed"] or rec["exit_code"] != 0:
            return []
        try:
            with self._open(rec) as d:
                return carry.index_rows(d)
        except ProbeError:
            return []

    def _open(self, rec: dict):
        from inkling_probe.store.reader import open_dump

        return open_dump(self.runner.path(rec))

    def _keys(self, rec: dict) -> list[str]:
        if rec["crashed"] or rec["exit_code"] != 0:
            raise StatsRunFailed(f"the reference's stats run failed (exit code {rec['exit_code']}); "
                                 f"see {rec['dir']}/output.txt")
        try:
            with self._open(rec) as d:
                return d.keys()
        except ProbeError as e:
            raise StatsRunFailed(f"the reference's stats run left no readable dump: {e}") from None

    def _nonfinite_onset(self, stats: dict, us: list[dict]) -> int | None:
        cand = stats["cand"]
        if cand["crashed"] or cand["exit_code"] != 0:
            self.runner.settle(list(stats.values()), "bad")
            return None
        counts = {side: _nonfinite_by_key(self._open(rec)) for side, rec in stats.items()}
        onset = None
        for i, u in enumerate(us):
            keys = [k for k in counts["cand"] if _in_unit(k, u)]
            if any(counts["cand"][k] and not counts["ref"].get(k) for k in keys):
                onset = i
                break
        self.runner.settle(list(stats.values()), "good" if onset is None else "bad")
        return onset


class StatsRunFailed(ProbeError):
    """The reference's stats run did not give the probe order."""


def _nonfinite_by_key(dump) -> dict[str, int]:
    out: dict[str, int] = {}
    with dump:
        for r in dump.index:
            out[r["key"]] = out.get(r["key"], 0) + int(r.get("nan", 0)) + int(r.get("inf", 0))
    return out


def _in_unit(key: str, unit: dict) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(key, g) for g in unit["globs"])

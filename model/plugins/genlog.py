"""The generation log of ``inkling-probe run --gen-log FILE``: one JSON line per response.

Each line: ``id`` (request index), ``prompt`` (its ids), ``tokens`` (generated ids, the finishing
id included), ``finish_reason`` (``eos``, ``stop``, ``length``), ``max_new_tokens``, ``eos_ids``
(every id that should have finished it, end id first) and ``eos_source``, and ``steps``: per
generated token the top logits it was picked from (``top``: [[id, logit], ...], best first) and
``nonfinite``, the count of NaN/Inf logits at that step. ``inkling-probe health`` reads it.
A teacher-forced run (``run --force-tokens REF_DUMP``) adds ``forced_from`` (REF_DUMP), and on each
step where the candidate's own pick differs from the token it was fed: ``own`` (its pick), ``forced``
(the reference's token, the one in ``tokens``) and ``margin`` (its top logit minus its logit for the
forced token): a decision, not an error.
"""
from __future__ import annotations

import json
import math

TOP = 5


class StepLog:
    """``on_step`` callback for :func:`inkling_model.generate.generate`: a summary per request and step."""

    def __init__(self, n_requests: int, top: int = TOP):
        self.top = top
        self.steps: list[list[dict]] = [[] for _ in range(n_requests)]

    def __call__(self, i: int, logits) -> None:
        finite = logits.float().isfinite()
        values, ids = logits.float().nan_to_num(nan=-math.inf).topk(min(self.top, logits.shape[-1]))
        self.steps[i].append({"top": [[int(t), _num(v)] for t, v in zip(ids.tolist(), values.tolist())],
                              "nonfinite": int((~finite).sum())})

    def of(self, i: int) -> list[dict]:
        return self.steps[i]


def _num(v: float):
    """A JSON-safe logit (infinities as strings, as json.dumps would otherwise write non-JSON)."""
    return v if math.isfinite(v) else str(v)


def write(path: str, prompts: list[list[int]], responses: list[dict], max_new_tokens: int, eos) -> None:
    """Write one line per response (see the module docstring)."""
    eos_ids = ([] if eos.end_id is None else [eos.end_id]) + list(eos.stop_ids)
    with open(path, "w") as f:
        for r in responses:
            line = {"id": r["id"], "prompt": prompts[r["id"]], "tokens": r["tokens"],
                    "finish_reason": r["finish_reason"], "max_new_tokens": max_new_tokens,
                    "eos_ids": eos_ids, "eos_source": eos.source, "steps": r.get("steps", [])}
            if r.get("forced"):
                line.update(_forced(line["steps"], r["forced"]))
            f.write(json.dumps(line) + "\n")


def _forced(steps: list[dict], forced: dict) -> dict:
    """``forced_from`` and the steps with the candidate's own differing picks marked (module docstring)."""
    steps = [dict(s) for s in steps]
    for d in forced["decisions"]:
        if d["step"] < len(steps):
            steps[d["step"]].update(own=d["own"], forced=d["forced"], margin=_num(d["margin"]))
    return {"forced_from": forced["from"], "steps": steps}

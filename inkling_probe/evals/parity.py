"""Generation parity of two runs over the same token stream (``inkling-probe parity``), from their dumps.

Both runs record ``logits`` (step 0 the prefill of one request, then one row per greedy decode
step). Teacher-forced positions are the prefill rows and the decode steps whose inputs still agree
(up to and including the first step whose token differs). At each, the argmax tokens are compared; a
mismatch is a near-tie when the reference's margin between its token and the candidate's is below
``near_tie`` times that position's logit standard deviation (a scale-free threshold; the absolute
value is reported), else confident. Free run: the tokens each run picked, the first index where they
differ, and collapse in each run after it. A checksum over every step's logits (dtype, shape and
bytes) makes identical runs provably identical.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from inkling_probe.evals.health import longest_run, repeat_rate
from inkling_probe.evals.jsonl import EvalInputError


@dataclass
class Mismatch:
    step: int
    row: int
    ref_token: int
    cand_token: int
    ref_margin: float  # ref[ref_token] - ref[cand_token] (> 0)
    threshold: float  # the absolute near-tie threshold at this position
    kind: str  # "near_tie" or "confident"


@dataclass
class Parity:
    """The result of :func:`compare`."""

    positions: int
    mismatches: list[Mismatch]
    near_tie: float
    ref_tokens: list[int]
    cand_tokens: list[int]
    diverged_at: int | None
    checksums: tuple[str, str]
    notes: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(m.kind == kind for m in self.mismatches)

    def collapse_after(self, tokens: list[int]) -> dict:
        tail = tokens[self.diverged_at:] if self.diverged_at is not None else []
        run, tok = longest_run(tail)
        return {"tokens": len(tail), "longest_run": run, "token": tok, "repeat_rate_4": repeat_rate(tail, 4)[0]}

    def to_dict(self) -> dict:
        return {"positions": self.positions, "tf_mismatch": len(self.mismatches), "near_tie": self.count("near_tie"),
                "confident": self.count("confident"), "near_tie_threshold": self.near_tie,
                "mismatches": [m.__dict__ for m in self.mismatches],
                "free_run": {"ref_tokens": self.ref_tokens, "cand_tokens": self.cand_tokens,
                             "diverged_at": self.diverged_at, "ref_after": self.collapse_after(self.ref_tokens),
                             "cand_after": self.collapse_after(self.cand_tokens)},
                "checksum": {"ref": self.checksums[0], "cand": self.checksums[1],
                             "identical": self.checksums[0] == self.checksums[1]}, "notes": self.notes}


def checksum(steps: list[np.ndarray]) -> str:
    """A digest of every step's logits: dtype, shape and bytes, in step order."""
    h = hashlib.sha256()
    for a in steps:
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def free_run(steps: list[np.ndarray]) -> list[int]:
    """The greedy token each step picked: the argmax of its last row."""
    return [int(np.argmax(s[-1])) for s in steps]


def classify(ref: np.ndarray, cand: np.ndarray, near_tie: float, step: int) -> list[Mismatch]:
    """Mismatched argmax rows of one step's teacher-forced logits [rows, V]."""
    ref, cand = ref.astype(np.float64), cand.astype(np.float64)
    r_arg, c_arg = ref.argmax(-1), cand.argmax(-1)  # [rows]
    out = []
    for row in np.flatnonzero(r_arg != c_arg):
        margin = float(ref[row, r_arg[row]] - ref[row, c_arg[row]])
        threshold = near_tie * float(ref[row].std())
        out.append(Mismatch(step, int(row), int(r_arg[row]), int(c_arg[row]), margin, threshold,
                            "near_tie" if margin < threshold else "confident"))
    return out


def compare(ref_steps: list[np.ndarray], cand_steps: list[np.ndarray], near_tie: float = 0.05) -> Parity:
    """Parity of two runs' per-step logits (each [rows, V]; step 0 the prefill)."""
    _check_shapes(ref_steps, cand_steps)
    ref_tok, cand_tok = free_run(ref_steps), free_run(cand_steps)
    n = min(len(ref_tok), len(cand_tok))
    diverged = next((i for i in range(n) if ref_tok[i] != cand_tok[i]), None)
    last = diverged if diverged is not None else n - 1  # the last step whose inputs agree
    mismatches, positions = [], 0
    for s in range(last + 1):
        mismatches += classify(ref_steps[s], cand_steps[s], near_tie, s)
        positions += ref_steps[s].shape[0]
    notes = [] if len(ref_tok) == len(cand_tok) else [f"runs have {len(ref_tok)} and {len(cand_tok)} steps"]
    return Parity(positions, mismatches, near_tie, ref_tok, cand_tok, diverged,
                  (checksum(ref_steps), checksum(cand_steps)), notes)


def _check_shapes(ref_steps: list[np.ndarray], cand_steps: list[np.ndarray]) -> None:
    if not ref_steps or not cand_steps:
        raise EvalInputError("a run has no logits steps")
    if ref_steps[0].shape != cand_steps[0].shape:
        raise EvalInputError(f"prefill logits {list(ref_steps[0].shape)} vs {list(cand_steps[0].shape)}: "
                             "not the same token stream")
    for s, a in enumerate(ref_steps[1:] + cand_steps[1:]):
        if a.ndim != 2 or a.shape[0] != 1:
            raise EvalInputError(f"a decode step holds logits {list(a.shape)}: parity compares one request per run")


def load_steps(path: str, key: str = "logits") -> list[np.ndarray]:
    """Every step's ``key`` of the dump at ``path`` as numpy ([rows, V]; a leading batch dim of 1 dropped)."""
    from inkling_probe.errors import ProbeError
    from inkling_probe.store.reader import open_dump

    try:
        with open_dump(path) as d:
            steps = d.steps(key)
            arrays = [d.array(key, s) for s in steps]
    except ProbeError as e:
        raise EvalInputError(str(e)) from None
    if steps != list(range(len(steps))):
        raise EvalInputError(f"{path}: {key!r} has steps {steps}, expected 0..{len(steps) - 1} without gaps")
    return [a[0] if a.ndim == 3 and a.shape[0] == 1 else a for a in arrays]

"""Generation health from a gen-log (``run --gen-log``; JSON lines, one per response).

Per response: the finish reason; end-of-sequence ids emitted but not honoured (generation went on,
or stopped for another reason); stopped by the token cap, which is ``capped`` (healthy: the limit
was reached while an end id is known and was never emitted, e.g. a short ``--max-new-tokens``) or
``runaway`` (no end id is known, or one was emitted and not honoured); collapse
(the longest run of one token, and the n-gram repetition rate: the share of n-grams that repeat an
earlier one); non-finite logits (when the log holds per-step counts). A response with any of these
problems is unhealthy (a capped response too, with ``fail_capped``).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from inkling_probe.evals import jsonl
from inkling_probe.evals.jsonl import EvalInputError


@dataclass(frozen=True)
class Limits:
    """When collapse counts as a problem: a run of ``max_run`` equal tokens, or a repetition rate of
    ``max_repeat`` over at least ``min_ngrams`` n-grams of ``ngram`` tokens; ``fail_capped``: a capped
    response (module docstring) is a problem too."""

    max_run: int = 8
    ngram: int = 4
    max_repeat: float = 0.5
    min_ngrams: int = 8
    fail_capped: bool = False


@dataclass
class Response:
    """One response's findings."""

    id: object
    finish_reason: str
    n_tokens: int
    max_new_tokens: int | None
    eos_ids: list[int]
    eos_not_honoured: list[int]  # positions of end ids that did not end the response
    runaway: bool  # stopped by the cap with no end id known, or after one was not honoured
    longest_run: int
    longest_run_token: int | None
    repeat_rate: float
    nonfinite: int | None  # None: the log has no per-step counts
    capped: bool = False  # stopped by the cap, an end id known and never emitted (healthy by default)
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items()}, "healthy": self.healthy}


def load(path: str, extra_eos: list[int] = ()) -> list[dict]:
    """The gen-log's records, checked (bad lines raise :class:`EvalInputError` naming line, key, value)."""
    out = []
    for n, obj in jsonl.read(path):
        tokens = jsonl.int_list(path, n, obj, "tokens")
        reason = obj.get("finish_reason")
        if not isinstance(reason, str):
            raise jsonl.bad(path, n, "finish_reason", reason, "a string (eos, stop, length)")
        cap = obj.get("max_new_tokens")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise jsonl.bad(path, n, "max_new_tokens", cap, "a non-negative integer")
        eos = jsonl.int_list(path, n, obj, "eos_ids", required=False) + list(extra_eos)
        steps = obj.get("steps")
        if steps is not None and (not isinstance(steps, list) or not all(_step_ok(s) for s in steps)):
            raise jsonl.bad(path, n, "steps", steps, "a list of {top, nonfinite} objects")
        out.append({"id": obj.get("id", n), "tokens": tokens, "finish_reason": reason, "max_new_tokens": cap,
                    "eos_ids": list(dict.fromkeys(eos)), "steps": steps or None})
    return out


def _step_ok(s) -> bool:
    return isinstance(s, dict) and isinstance(s.get("nonfinite", 0), int) and not isinstance(s.get("nonfinite"), bool)


def check(record: dict, limits: Limits = Limits()) -> Response:
    """The findings for one record of :func:`load`."""
    tokens, eos = record["tokens"], set(record["eos_ids"])
    finished = record["finish_reason"] in ("eos", "stop")
    not_honoured = [i for i, t in enumerate(tokens) if t in eos and not (finished and i == len(tokens) - 1)]
    cap = record["max_new_tokens"]
    at_cap = not finished and cap is not None and len(tokens) >= cap > 0
    runaway = at_cap and (not eos or bool(not_honoured))
    run, run_token = longest_run(tokens)
    rate, n_grams = repeat_rate(tokens, limits.ngram)
    nonfinite = None if record["steps"] is None else sum(s.get("nonfinite", 0) for s in record["steps"])
    r = Response(record["id"], record["finish_reason"], len(tokens), cap, record["eos_ids"], not_honoured,
                 runaway, run, run_token, rate, nonfinite, capped=at_cap and not runaway)
    if not_honoured:
        r.problems.append(f"end id emitted but not honoured at {len(not_honoured)} position(s), first {not_honoured[0]}")
    if runaway:
        why = "an end id was emitted and not honoured" if eos else "no end id known"
        r.problems.append(f"runaway: ran to the token cap ({cap}); {why}")
    if r.capped and limits.fail_capped:
        r.problems.append(f"capped: reached the token cap ({cap}) without emitting an end id")
    if run >= limits.max_run:
        r.problems.append(f"collapse: token {run_token} repeated {run} times in a row")
    if n_grams >= limits.min_ngrams and rate >= limits.max_repeat:
        r.problems.append(f"collapse: {rate:.0%} of {limits.ngram}-grams repeat")
    if nonfinite:
        r.problems.append(f"{nonfinite} non-finite logits")
    return r


def longest_run(tokens: list[int]) -> tuple[int, int | None]:
    """(length, token) of the longest run of one token."""
    best, best_tok, run = 0, None, 0
    for i, t in enumerate(tokens):
        run = run + 1 if i and tokens[i - 1] == t else 1
        if run > best:
            best, best_tok = run, t
    return best, best_tok


def repeat_rate(tokens: list[int], n: int) -> tuple[float, int]:
    """(share of n-grams equal to an earlier n-gram, number of n-grams)."""
    grams = [tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0, 0
    return 1.0 - len(set(grams)) / len(grams), len(grams)


@dataclass
class Summary:
    """Every response's findings, the finish-reason mix and the worst offenders."""

    path: str
    responses: list[Response]

    @property
    def unhealthy(self) -> list[Response]:
        return [r for r in self.responses if not r.healthy]

    def worst(self, k: int = 5) -> list[Response]:
        return sorted(self.unhealthy, key=lambda r: (-len(r.problems), -r.n_tokens))[:k]

    def to_dict(self) -> dict:
        problems = Counter(p.split(":")[0].split(" at ")[0] for r in self.responses for p in r.problems)
        return {"path": self.path, "n": len(self.responses), "unhealthy": len(self.unhealthy),
                "capped": sum(r.capped for r in self.responses),
                "finish_reasons": dict(Counter(r.finish_reason for r in self.responses)),
                "problems": dict(problems), "worst": [r.id for r in self.worst()],
                "responses": [r.to_dict() for r in self.responses]}


def summarize(path: str, extra_eos: list[int] = (), limits: Limits = Limits()) -> Summary:
    """Read ``path`` and check every response."""
    records = load(path, extra_eos)
    if not records:
        raise EvalInputError(f"{path}: no responses")
    return Summary(path, [check(r, limits) for r in records])

"""One trial: run a command (or a few), judge the outcome, file the runs under good/, bad/ or inconclusive/."""
from __future__ import annotations

from inkling_probe.bisect.oracle import outcome, verdict

FOLDER = {"pass": "good", "fail": "bad", "inconclusive": "inconclusive"}


def trial(runner, oracle, on_crash: str, key: str, label: str, command, env: dict) -> dict:
    """Run ``command`` with ``env`` and judge it with ``oracle``; the verdict is kept by ``key``."""
    rec = runner.execute(key, label, command, env, record=oracle.needs_dump)
    v = runner.state.verdicts.get(key)
    if v is None:
        v = verdict(rec, oracle.judge(rec, runner), on_crash)
        runner.settle([rec], FOLDER[outcome(v)])
        runner.state.set_verdict(key, v)
    if runner.first_report(f"verdict:{key}"):
        runner.progress("verdict", {"key": key, "label": label, **v})
    return v


def reason(v: dict) -> str:
    """Why a verdict failed or could not be checked, for messages: the crash, the compare's first
    divergence, or what could not be checked."""
    if v.get("crashed") or v.get("inconclusive"):
        return f" ({v.get('why')})"
    if v.get("first_divergence"):
        return f" (first divergence {v['first_divergence']})"
    if v.get("unchecked"):
        return f" (could not check {v.get('n_unchecked', len(v['unchecked']))} row(s): {v['unchecked'][0]})"
    return ""


def skipped(tests: dict[str, dict], asked: dict[str, dict]) -> list[dict]:
    """The inconclusive trials among ``tests`` (key -> verdict), in the order they were asked:
    ``[{**asked[key], "why": <one line>}]`` (``asked[key]``: the trial's label and what it set)."""
    return [{**asked[k], "why": v.get("why") or "could not check"} for k, v in tests.items()
            if v.get("inconclusive")]


def run_rows(state) -> list[dict]:
    """Every run with its verdict, for the --json document and the summary table."""
    rows = []
    for r in state.runs:
        v = state.verdicts.get(r.get("trial", r["key"]), {})
        rows.append({k: r.get(k) for k in ("n", "label", "command", "env", "exit_code", "crashed", "why",
                                            "seconds", "dir", "dump", "tail")}
                    | {"passed": v.get("passed"), "inconclusive": bool(v.get("inconclusive")),
                       "resumed": bool(r.get("resumed"))})
    return rows

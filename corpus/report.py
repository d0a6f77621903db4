"""The bench's text output: the result table, then the summary figures."""
from __future__ import annotations

import re

COLUMNS = ("case", "regime", "truth", "culprit", "first divergence", "c/ctl", "explain", "verdict")


def short(key) -> str:
    """A key for the table: the architectures' root prefixes dropped (``model.``, ``gpt_neox.``)."""
    if not key:
        return "-"
    return re.sub(r"^(model\.|gpt_neox\.)", "", key)


def _truth(r) -> str:
    if not r.truth:
        return "(benign)"
    return " | ".join(_compact([short(k) for k in r.truth])) + (f" @step {r.step}" if r.step is not None else "")


def _compact(keys: list) -> list:
    """Sibling keys folded: ``a.gate.0 | a.gate.1`` -> ``a.gate.{0,1}``."""
    groups: dict = {}
    for k in keys:
        head, _, tail = k.rpartition(".")
        groups.setdefault(head, []).append(tail)
    return [f"{h}.{{{','.join(t)}}}" if len(t) > 1 and h else (f"{h}.{t[0]}" if h else t[0])
            for h, t in groups.items()]


def _culprit(r) -> str:
    return short(r.culprit) + (f" @step {r.culprit_step}" if r.step is not None and r.culprit else "")


def _first(r) -> str:
    return short(r.first) + (f" @step {r.first_step}" if r.step is not None and r.first else "")


def _ratio(r) -> str:
    """Candidate error / control error at the truth key: how far the fault stands above the noise."""
    return f"{r.truth_ratio:.1f}" if r.truth_ratio is not None else "-"


def _explain(r) -> str:
    if r.kind == "benign" or r.explain_ok is None:
        return "-"
    return ("yes " if r.explain_ok else "no ") + (",".join(r.findings) or "(none)")


def _verdict(r) -> str:
    if r.error:
        return "ERROR " + r.error[:60]
    if r.kind == "benign":
        return ("ok" if r.ok else f"FLAGGED (worst {short(r.worst)})") + (" (unchecked keys)" if r.unchecked else "")
    if r.ok:
        return "ok"
    silent = "" if r.diverged or r.unchecked else " SILENT"
    return ("MISS" + silent + (f" (truth score {r.truth_score:.2f}" if r.truth_score is not None else " (")
            + (f", fault size {r.fault_size:.2%})" if r.fault_size is not None else ")")).replace(" ()", "")


SILENT_SIZE = 0.04  # issue 41 (was 5 %, issue 21): a silent pass is a planted fault of 4 % or more relative error that exits 0


def rows(results) -> list[tuple]:
    return [(r.case, r.regime, _truth(r), _culprit(r), _first(r), _ratio(r), _explain(r), _verdict(r))
            for r in results]


def table(results) -> str:
    body = rows(results)
    widths = [max(len(COLUMNS[i]), *(len(b[i]) for b in body)) if body else len(COLUMNS[i])
              for i in range(len(COLUMNS))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(COLUMNS), line(["-" * w for w in widths])] + [line(b) for b in body])


def _frac(n, d) -> str:
    return f"{n}/{d}" + (f" ({100 * n / d:.0f}%)" if d else "")


def summary(results) -> str:
    out = []
    faults = [r for r in results if r.kind == "fault"]
    benign = [r for r in results if r.kind == "benign"]
    for regime in sorted({r.regime for r in faults}):
        fr = [r for r in faults if r.regime == regime]
        none = sum(1 for r in fr if not r.culprit and not r.error)
        out.append(f"top-1 {regime:9s} {_frac(sum(r.ok for r in fr), len(fr))}, no culprit {none}")
    out.append(f"top-1 all       {_frac(sum(r.ok for r in faults), len(faults))}")
    judged = [r for r in faults if r.explain_ok is not None]
    out.append(f"explain         {_frac(sum(r.explain_ok for r in judged), len(judged))} of the right culprits "
               "carry a finding of the fault's kind")
    for regime in sorted({r.regime for r in benign}):
        br = [r for r in benign if r.regime == regime]
        out.append(f"false positives {regime:9s} {_frac(sum(not r.ok for r in br), len(br))} benign pairs flagged")
    out.append(f"false positives all {_frac(sum(not r.ok for r in benign), len(benign))}")
    hard = [r for r in faults if r.truth_is_first is False or r.truth_is_max_error is False
            or r.truth_is_max_jump is False]
    out.append(f"hard cases      {len(hard)} fault runs where the truth is not the first divergence, "
               "the largest error or the largest jump; "
               f"not first {sum(r.truth_is_first is False for r in faults)}, "
               f"not largest error {sum(r.truth_is_max_error is False for r in faults)}, "
               f"not largest jump {sum(r.truth_is_max_jump is False for r in faults)}")
    silent = [r for r in faults if not r.error and not r.diverged and not r.unchecked]
    sizes = {r.case: r.fault_size for r in faults if r.regime == "fp32" and r.fault_size is not None}
    size = lambda r: sizes.get(r.case, r.fault_size)  # the fp32 twin's (the fault alone) where there is one
    big = [r for r in silent if size(r) is None or size(r) >= SILENT_SIZE]
    small = [r for r in silent if r not in big]
    desc = lambda rs: "; ".join(f"{r.case} {r.regime} (size " + (f"{size(r):.2%}" if size(r) is not None
                                                                  else "unmeasured") + ")" for r in rs[:8])
    out.append(f"silent passes   {len(big)} planted faults of {SILENT_SIZE:.0%} or more (or unmeasured) exit 0 "
               f"(no divergence, nothing unchecked)" + (": " + desc(big) if big else ""))
    out.append(f"silent small    {len(small)} planted faults under {SILENT_SIZE:.0%} exit 0" + (": " + desc(small) if small else ""))
    unchecked = [r for r in results if r.unchecked and not r.diverged]
    if unchecked:
        out.append(f"unchecked       {len(unchecked)} comparisons exit 125 (inconclusive) on unchecked keys alone: "
                   + "; ".join(f"{r.case} {r.regime} ({r.unchecked[:80]})" for r in unchecked[:4]))
    errors = [r for r in results if r.error]
    if errors:
        out.append(f"errors          {len(errors)}: " + "; ".join(f"{r.case} {r.regime}" for r in errors))
    return "\n".join(out)

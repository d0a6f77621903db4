"""The regimes every transformers case runs in, as reference/candidate/control trios.

- ``fp32``: fp32 reference, fp32 candidate, no control (compare's dtype defaults decide).
- ``bf16+ctl``: fp32 reference, bf16 candidate, and a control: a benign bf16 twin of the
  candidate without the fault that differs in other benign ways too (sdpa attention, 2 threads),
  so its noise floor is measured, not copied from the candidate.
"""
from __future__ import annotations

from inkling_corpus.case import Case, Run, Trio


def twin(family: str, prompt: int = 0) -> Run:
    """The bf16 control: no fault, sdpa attention, two threads."""
    return Run(family, "bf16", prompt=prompt).with_(attn="sdpa", threads=2)


def fault_case(family, mod, decode: int = 0) -> Case:
    """The fault ``mod`` in both regimes; ``decode`` > 0 adds that many decode steps to every run."""
    more = {"decode": decode} if decode else {}
    base = Run(family.name).with_(**more)
    trios = {"fp32": Trio(base, base.with_(fault=mod.name)),
             "bf16+ctl": Trio(base, base.with_(dtype="bf16", fault=mod.name), twin(family.name).with_(**more))}
    return Case(f"{family.name}/{mod.name}", "fault", {r: trios[r] for r in mod.regimes}, truth=mod.truth,
                step=mod.step, explain=mod.explain, note=mod.note, quick=mod.quick)


def benign_case(family: str, name: str, settings: dict, note: str, prompt: int = 0, quick=False) -> Case:
    """``settings`` is the benign difference (variant settings of the candidate, or dtype)."""
    base = Run(family, prompt=prompt)
    if settings.get("dtype") == "bf16":  # the pair is the dtype itself
        cand = base.with_(**settings)
        trios = {"bf16": Trio(base, cand), "bf16+ctl": Trio(base, cand, twin(family, prompt))}
    else:
        trios = {"fp32": Trio(base, base.with_(**settings)),
                 "bf16+ctl": Trio(base, base.with_(dtype="bf16", **settings), twin(family, prompt))}
    return Case(f"{family}/{name}", "benign", trios, note=note, quick=quick)


def benign_set(family: str, extra=(), prompts=(0,), quick=()) -> list[Case]:
    """The benign pairs every transformers family has, plus ``extra`` (name, settings, note);
    case names in ``quick`` (with their prompt suffix) join the --quick subset."""
    common = [
        ("bf16_vs_fp32", {"dtype": "bf16"}, "bf16 run of the fp32 reference's weights"),
        ("threads_2", {"threads": 2}, "torch threads 1 vs 2"),
        ("sdpa_vs_eager", {"attn": "sdpa"}, "sdpa attention kernel vs eager"),
        ("batch4_row2", {"batch": 4, "row": 2, "slice": True},
         "the prompt as row 2 of a batch of 4 (that row recorded)"),
        ("batch4_row0_whole", {"batch": 4, "row": 0},
         "the prompt as row 0 of a batch of 4, whole batch recorded ([4, T, ...] vs [1, T, ...])"),
    ]
    out = []
    for name, settings, note in list(common) + list(extra):
        for p in prompts if name == "bf16_vs_fp32" else (0,):
            full = name + (f"_p{p}" if p else "")
            out.append(benign_case(family, full, settings, note, p, quick=full in quick))
    return out

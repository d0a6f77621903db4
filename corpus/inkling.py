"""inkling_model: its planted faults (model/switches/faults.py) at TP 1 and 2, and its benign pairs.

The reference is transformers' Inkling through the shipped ``hf_inkling`` name map, so keys are
the canonical probe names (``layers.3.mlp.experts``); true keys come from ``faults.location``.
NVFP4 faults compare against the correct NVFP4 engine in fp32, and against the bf16 truth with a
correct-NVFP4 control in bf16. The TP=2 runs are recorded by spawned ranks (inkling_runs.py).
"""
from __future__ import annotations

from inkling_corpus.case import Case, Run, Trio
from inkling_corpus.inkling_runs import ISSUE_PROMPT

NAME = "inkling"
TP2_PROMPTS = 10  # the issue asks the bf16 TP=1 vs TP=2 pair to pass on 10 prompts


def run(dtype="bf16", fault="", impl="native", tp=1, ckpt="bf16", seed=0, prompt=0) -> Run:
    return Run(NAME, dtype, fault, prompt=prompt).with_(impl=impl, tp=tp, ckpt=ckpt, seed=seed)


def hf(dtype, **kw) -> Run:
    return run(dtype, impl="hf", **kw)


def _truth(fault: str, seed: int = 0) -> tuple:
    from inkling_model.switches import faults
    from inkling_model.config import InklingConfig

    where = faults.location(fault, InklingConfig.preset("tiny"))
    # a scale bug is visible as the scale: the experts' recorded input_scale names it as well
    return (where, f"{where}.input_scale") if fault == "raw_input_amax" else (where,)


EXPLAIN = {"raw_input_amax": ("flushed", "zeroed", "ratio"), "gate_up_layout": ("permut", "layout", "input", "weight"),
           "renorm_rows": ("row", "confined"), "adp_global_tp_size": ("zeroed", "confined", "head"),
           "adp_dense_allreduce": ("row", "confined", "offset")}


def dp_run(dtype="fp32", fault="", dp=1, tp=1) -> Run:
    """Two requests of different lengths; dp=1 is the reference layout (one group serves both)."""
    return Run(NAME, dtype, fault, prompt=0).with_(impl="native", dp=dp, tp=tp, ckpt="bf16", seed=0)


def _adp_fault(fault: str, tp: int) -> Case:
    regimes = {"fp32": Trio(dp_run("fp32"), dp_run("fp32", fault, dp=2, tp=tp)),
               "bf16+ctl": Trio(dp_run("fp32"), dp_run("bf16", fault, dp=2, tp=tp), dp_run("bf16"))}
    return Case(f"{NAME}/{fault}_dp2tp{tp}", "fault", regimes, truth=_truth(fault), explain=EXPLAIN[fault],
                note=f"model/switches/faults.py {fault} at DP=2 x TP={tp} against DP=1")


def _adp_benign(tp: int) -> Case:
    regimes = {"fp32": Trio(dp_run("fp32"), dp_run("fp32", dp=2, tp=tp)),
               "bf16+ctl": Trio(dp_run("fp32"), dp_run("bf16", dp=2, tp=tp), dp_run("bf16"))}
    return Case(f"{NAME}/dp2tp{tp}_vs_dp1", "benign", regimes, note=f"attention-DP 2 x TP {tp} vs DP=1, no fault")


def _fault(fault: str, tp: int, quick=False) -> Case:
    other = 3 - tp
    if fault == "raw_input_amax":  # NVFP4 checkpoint: the correct NVFP4 engine is the fp32 reference
        regimes = {"fp32": Trio(run("fp32", ckpt="nvfp4"), run("fp32", fault, tp=tp, ckpt="nvfp4")),
                   "bf16+ctl": Trio(hf("bf16"), run("bf16", fault, tp=tp, ckpt="nvfp4"),
                                    run("bf16", tp=other, ckpt="nvfp4"))}
    else:
        regimes = {"fp32": Trio(hf("fp32"), run("fp32", fault, tp=tp)),
                   "bf16+ctl": Trio(hf("fp32"), run("bf16", fault, tp=tp), run("bf16", tp=other))}
    return Case(f"{NAME}/{fault}_tp{tp}", "fault", regimes, truth=_truth(fault), explain=EXPLAIN[fault],
                note=f"model/switches/faults.py {fault} at TP={tp}", quick=quick)


def _issue_case() -> Case:
    """Issue 8's seed-11 demo: hf fp32 reference on bf16, NVFP4 TP=1 control, NVFP4 TP=2 + raw amax."""
    kw = dict(seed=11, prompt=ISSUE_PROMPT)
    trio = Trio(hf("fp32", **kw), run("fp32", "raw_input_amax", tp=2, ckpt="nvfp4", **kw),
                run("fp32", tp=1, ckpt="nvfp4", **kw))
    return Case(f"{NAME}/raw_input_amax_seed11_issue", "fault", {"fp32+ctl": trio},
                truth=_truth("raw_input_amax"), explain=EXPLAIN["raw_input_amax"], note="issue 8's demo hunt (culprit moved to layers.4.mlp.topk_w)")


def _tp_pair(prompt: int) -> Case:
    regimes = {"fp32": Trio(run("fp32", prompt=prompt), run("fp32", tp=2, prompt=prompt)),
               "bf16": Trio(run("bf16", prompt=prompt), run("bf16", tp=2, prompt=prompt)),
               "bf16+ctl": Trio(hf("fp32", prompt=prompt), run("bf16", tp=2, prompt=prompt),
                                run("bf16", prompt=prompt))}
    return Case(f"{NAME}/tp2_vs_tp1_p{prompt}", "benign", regimes, note="TP=2 vs TP=1, no fault",
                quick=prompt in (0, 2))


def _benign_rest() -> list[Case]:
    nvfp4 = {"fp32": Trio(run("fp32", ckpt="nvfp4"), run("fp32", tp=2, ckpt="nvfp4")),
             "bf16+ctl": Trio(hf("bf16"), run("bf16", tp=2, ckpt="nvfp4"), run("bf16", ckpt="nvfp4"))}
    native = {"fp32": Trio(hf("fp32"), run("fp32")), "bf16": Trio(hf("fp32"), run("bf16")),
              "bf16+ctl": Trio(hf("fp32"), run("bf16"), hf("bf16"))}
    return [Case(f"{NAME}/nvfp4_tp2_vs_bf16", "benign", nvfp4,
                 note="correct NVFP4 at TP=2 vs the bf16 truth (control: correct NVFP4 at TP=1)"),
            Case(f"{NAME}/native_vs_hf", "benign", native, note="inkling_model vs transformers' Inkling", quick=True)]


def cases() -> list[Case]:
    faults = [_fault(f, tp, quick=(tp == 1 and f != "raw_input_amax"))
              for f in ("raw_input_amax", "gate_up_layout", "renorm_rows") for tp in (1, 2)]
    adp = [_adp_fault(f, tp) for f in ("adp_global_tp_size", "adp_dense_allreduce") for tp in (1, 2)]
    return (faults + adp + [_issue_case()] + [_tp_pair(p) for p in range(TP2_PROMPTS)] + _benign_rest()
            + [_adp_benign(tp) for tp in (1, 2)])


def record_many(items) -> dict:
    from inkling_corpus.inkling_runs import record_many as record

    return record(items)

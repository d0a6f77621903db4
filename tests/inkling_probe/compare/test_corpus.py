"""The localization corpus's quick subset (scripts/bench_localize.py --quick) as tests.

Every planted fault must be named top-1 at its true key, every benign pair must pass unflagged, in
each regime. The few cases compare v2 still gets wrong are marked xfail (strict: a fix must remove
the mark) with the reason. The
case list is written out here (collection stays fast: no transformers import) and checked against
the corpus's own quick subset.
"""
import pytest

pytestmark = pytest.mark.slow

FAULTS = [
    "llama/scale_down_1.03", "llama/norm_not_loaded", "llama/gqa_tiled", "llama/decode_drift",
    "qwen2_moe/expert3_is_expert5", "qwen2_moe/router_bias_small", "qwen2_moe/expert_rows_3_11",
    "gpt_neox/dense_bias_dropped", "gpt_neox/qkv_bias_layout", "gpt_neox/mask_off_by_one",
    "inkling/gate_up_layout_tp1", "inkling/renorm_rows_tp1",
]
BENIGN = [
    "llama/bf16_vs_fp32", "llama/sdpa_vs_eager", "llama/batch4_row2",
    "qwen2_moe/bf16_vs_fp32_p1", "qwen2_moe/experts_grouped_mm", "qwen2_moe/experts_batched_mm",
    "qwen2_moe/topk_unsorted", "gpt_neox/threads_2",
    "inkling/tp2_vs_tp1_p0", "inkling/tp2_vs_tp1_p2", "inkling/native_vs_hf",
]
REGIMES = {"llama/bf16_vs_fp32": ("bf16", "bf16+ctl"), "qwen2_moe/bf16_vs_fp32_p1": ("bf16", "bf16+ctl"),
           "inkling/tp2_vs_tp1_p0": ("fp32", "bf16", "bf16+ctl"), "inkling/tp2_vs_tp1_p2": ("fp32", "bf16", "bf16+ctl"),
           "inkling/native_vs_hf": ("fp32", "bf16", "bf16+ctl")}

WRONG_TOP1 = {  # (case, regime) -> why compare v2 still misses it (docs/COMPARE.md, failure modes)
    ("llama/decode_drift", "bf16+ctl"): "a drift at 1.7x the control's noise, under the allowance where it is "
                                        "born and not rising 3x over its inputs: named where it crosses",
}
EXPLAIN_MISSING = {  # right culprit, but no finding of the fault's kind
    ("gpt_neox/mask_off_by_one", r): "explain has no hypothesis for a causal mask off by one"
    for r in ("fp32", "bf16+ctl")} | {
    ("inkling/gate_up_layout_tp1", r): "inkling_model's probes record no module inputs, so 'inputs exact' "
                                       "cannot fire; replay (--confirm / --replay) names the interleave"
    for r in ("fp32", "bf16+ctl")}


def _pairs(names, default=("fp32", "bf16+ctl")):
    return [(n, r) for n in names for r in REGIMES.get(n, default)]


def _params(pairs, failing):
    return [pytest.param(c, r, id=f"{c}-{r}", marks=[pytest.mark.xfail(strict=True, reason=failing[(c, r)])]
                         if (c, r) in failing else []) for c, r in pairs]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The quick subset, recorded and compared once: ({(case, regime): Result}, sweep results)."""
    import torch

    from inkling_corpus import families, sweep
    from inkling_corpus.bench import run, select
    from inkling_corpus.dumps import Dumps

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fams = families.load()
        dumps = Dumps(str(tmp_path_factory.mktemp("corpus")), fams)
        results = run(select(fams, True, None), dumps, lambda msg: None)
        swept = run(sweep.cases(fams, quick=True), dumps, lambda msg: None)
    finally:
        torch.set_num_threads(threads)
    return {(r.case, r.regime): r for r in results}, swept


def test_the_lists_here_are_the_corpus_quick_subset(corpus):
    results, _ = corpus
    assert sorted(results) == sorted(_pairs(FAULTS) + _pairs(BENIGN))
    assert all(r.error is None for r in results.values()), [r.error for r in results.values() if r.error]


@pytest.mark.parametrize("case,regime", _params(_pairs(FAULTS), WRONG_TOP1))
def test_planted_fault_is_named_top1(corpus, case, regime):
    r = corpus[0][(case, regime)]
    assert r.ok, (f"culprit {r.culprit} (step {r.culprit_step}), first divergence {r.first} (step {r.first_step}), "
                  f"truth {r.truth}" + (f" at step {r.step}" if r.step is not None else ""))
    assert r.culprit in r.truth  # the same verdict, spelled out


@pytest.mark.parametrize("case,regime", _params(_pairs(BENIGN), WRONG_TOP1))
def test_benign_pair_is_not_flagged(corpus, case, regime):
    r = corpus[0][(case, regime)]
    assert not r.diverged and r.culprit is None, f"flagged: culprit {r.culprit}, worst {r.worst}"
    assert not r.unchecked, r.unchecked  # exit 0: MoE expert rows after a flip are judged by slot (experts.py)


@pytest.mark.parametrize("case,regime", _params([p for p in _pairs(FAULTS) if p not in WRONG_TOP1],
                                               EXPLAIN_MISSING))
def test_culprit_is_explained_by_the_faults_kind(corpus, case, regime):
    r = corpus[0][(case, regime)]
    assert r.explain_ok, f"findings {r.findings}"


def _found(swept, family, regime, factor):
    return next(r.ok for r in swept if (r.family, r.regime) == (family, regime) and r.case.endswith(f"_x{factor}"))


@pytest.mark.parametrize("family", ["llama", "qwen2_moe"])
def test_fp32_finds_a_one_percent_scale(corpus, family):
    assert _found(corpus[1], family, "fp32", 1.01)


@pytest.mark.parametrize("family", ["llama", "qwen2_moe"])
def test_bf16_with_control_finds_a_three_percent_scale(corpus, family):
    assert _found(corpus[1], family, "bf16+ctl", 1.03)

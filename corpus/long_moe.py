"""Long MoE prompts (issue 41): 512-token bf16 MoE runs with expert- and row-confined faults of 4-30 %.

Shared by three families, one per transformers MoE shape (:mod:`.long_qwen3_moe`, :mod:`.long_mixtral`,
:mod:`.long_deepseek_v3`), each tiny (hidden 64, 4 layers, 8 experts top-2) but fed a 512-token
prompt, where a confined fault is a small share of a key's rows and bf16 flips near-tie routing
decisions on many tokens. Every fault is planted in or on the routed experts, so its truth is the
routed-experts key ``model.layers.N.mlp.experts`` (the routed sum over flattened ``[T, H]`` tokens;
a shared expert, where there is one, is added after it):

- ``expert3_x1.2``: expert 3's down_proj loaded x1.2 in layer 2 (only the rows routed to expert 3);
- ``rows_300_420_x{1.1,1.2,1.3}``: rows 300..419 of layer 3's routed output scaled (a scatter bug
  on a late span of tokens);
- ``experts_x1.04``: every routed expert's down_proj x1.04 in layer 2 (the whole key, 4 %).

Benign pairs: bf16 vs fp32 and sdpa vs eager, in the corpus's two regimes (regimes.py). None is in
the --quick subset: these are for scripts/bench_localize.py (tests/.../test_corpus_long.py records one).
"""
from __future__ import annotations

from inkling_corpus import plant
from inkling_corpus.case import Case
from inkling_corpus.hf import Family, Mod
from inkling_corpus.regimes import benign_case, fault_case

TOKENS = 512
L = "model.layers"
EXPERT, EXPERT_LAYER = 3, 2
ROWS, ROWS_LAYER = range(300, 420), 3


def experts(layer: int) -> str:
    return f"{L}.{layer}.mlp.experts"


def _one_expert(e: int, factor: float):
    def edit(w):  # [E, H, I]
        w = w.clone()
        w[e] *= factor
        return w
    return edit


def _rows(factor: float):
    return lambda t: plant.rows(t, ROWS, factor, 0)  # [T, H]: the routed sum over flattened tokens


def mods() -> list[Mod]:
    one, span = experts(EXPERT_LAYER), experts(ROWS_LAYER)
    out = [Mod(f"expert{EXPERT}_x1.2", plant.param(one, _one_expert(EXPERT, 1.2), "down_proj"), (one,),
               ("expert", "confined", "row"), note=f"expert {EXPERT}'s down_proj loaded x1.2 (its rows only)")]
    out += [Mod(f"rows_{ROWS.start}_{ROWS.stop}_x{f}", plant.output(span, _rows(f)), (span,), ("row", "confined"),
                note=f"rows {ROWS.start}..{ROWS.stop - 1} of {TOKENS} of the routed output x{f} (a scatter bug)")
            for f in (1.1, 1.2, 1.3)]
    out.append(Mod("experts_x1.04", plant.scale(one, 1.04, "down_proj"), (one,), ("ratio",),
                   note="every routed expert's down_proj x1.04 (the whole key, 4 %)"))
    return out


def family(name: str, make_config, model_cls) -> Family:
    return Family(name, make_config, model_cls, {m.name: m for m in mods()}, tokens=TOKENS)


BENIGN = [
    ("bf16_vs_fp32", {"dtype": "bf16"}, f"bf16 run of the fp32 reference's weights, {TOKENS} tokens"),
    ("sdpa_vs_eager", {"attn": "sdpa"}, f"sdpa attention kernel vs eager, {TOKENS} tokens"),
]


def cases(fam: Family) -> list[Case]:
    return ([fault_case(fam, m) for m in fam.mods.values() if m.truth]
            + [benign_case(fam.name, name, settings, note) for name, settings, note in BENIGN])

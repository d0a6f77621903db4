"""Inkling bf16 against fp32 with a control: transformers' shared experts run stacked, ``[S, B*T, I]``
(S = 2 shared experts), so their activations hold the tokens in dim 1. record() found no token dim
there, and compare's dispatch-order rule then set those keys aside as "not comparable" in every routed
layer after a routing change (prefill), or paired them as routed slots where S == T x top-k (a decode
step: [2, 1, I] with T = 1, k = 2). record()'s layout rule ``[X, B*T, ...]`` -> token dim 1
(inkling_probe/hooks.py) fixes it; these tests pin it."""
import pytest
import torch

import inkling_probe
from inkling_probe.compare import compare
from inkling_probe.store.dump import Dump

PROMPT = 1  # seeded ids on which bf16 flips one top-k pick of layer 3 (prefill) against fp32


def _ids() -> list[int]:
    gen = torch.Generator().manual_seed(2000 + PROMPT)
    return torch.randint(3, 500, (24,), generator=gen).tolist()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from inkling_model.checkpoint.hf_reference import load_hf_model
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.checkpoint.weights import load_checkpoint
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("inkling")
    ck = str(root / "ck")
    write_random_checkpoint(InklingConfig.preset("tiny"), ck, seed=0)
    ids = _ids()
    out = {}
    for name, dtype in (("ref", torch.float32), ("cand", torch.bfloat16)):  # transformers' Inkling
        model = load_hf_model(ck, dtype)
        out[name] = str(root / name)
        with torch.no_grad(), inkling_probe.record(model, out[name], name_map="hf_inkling", writer="inline"):
            inkling_probe.step()
            model(input_ids=torch.tensor([ids]))
    config = InklingConfig.from_pretrained(ck)  # the control: inkling_model in bf16
    model = InklingForCausalLM(config, dtype=torch.bfloat16)
    load_checkpoint(model, ck, config)
    out["ctl"] = str(root / "ctl")
    with torch.no_grad(), inkling_probe.recording(out["ctl"], writer="inline"):
        model(torch.tensor(ids))
    return out


SHARED = "model.layers.3.mlp.shared_experts.act_fn"


def test_shared_expert_activations_record_their_token_dim(runs):
    with Dump(runs["ref"]) as d:
        row = next(r for r in d.index if r["key"] == SHARED)
    assert tuple(row["shape"]) == (2, 24, 64) and row["token_dim"] == 1


def test_bf16_against_fp32_with_a_control_judges_the_shared_experts(runs):
    rep = compare(runs["ref"], runs["cand"], control=runs["ctl"], explain=False)
    assert "layers.3.mlp.topk_idx" in {r.key for r in rep.rows if r.status != "exact" or r.note}  # the flip is there
    shared = [r for r in rep.rows if "shared_experts" in r.key]
    assert shared and all(r.status in ("ok", "exact") for r in shared), [(r.key, r.status, r.note) for r in shared
                                                                           if r.status not in ("ok", "exact")]
    assert all(r.rows_recorded == 24 and r.rows_judged >= 23 for r in shared)  # the flipped token's row set aside
    assert not rep.diverged and not rep.unchecked, rep.unchecked_reason


def test_a_fault_in_a_shared_expert_is_still_found(runs, tmp_path):
    from inkling_model.checkpoint.hf_reference import load_hf_model

    ck = str(__import__("pathlib").Path(runs["ref"]).parent / "ck")
    model = load_hf_model(ck, torch.bfloat16)
    act = model.model.layers[2].mlp.shared_experts.act_fn
    act.register_forward_hook(lambda m, a, out: out * 1.1)
    path = str(tmp_path / "fault")
    with torch.no_grad(), inkling_probe.record(model, path, name_map="hf_inkling", writer="inline"):
        inkling_probe.step()
        model(input_ids=torch.tensor([_ids()]))
    rep = compare(runs["ref"], path, control=runs["ctl"], explain=False)
    assert rep.diverged and rep.culprit.key == "model.layers.2.mlp.shared_experts.act_fn", [
        (c.key, c.status) for c in rep.culprits]

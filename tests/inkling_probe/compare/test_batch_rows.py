"""One prompt inside a batch against the same prompt alone (``cand_row``): tensors with no token dim
whose leading dim is the batch (lm_head's input under generate: the last token only) are cut to the
row (compare/conform.py); shapes that cannot be aligned say which shapes and what was tried."""
import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.compare import compare
from inkling_probe.compare.conform import ShapeMismatch, conform
from inkling_probe.compare.values import Values

from dumps import write

PROMPT = [3, 5, 7, 9, 11, 13]
OTHER = [2, 4, 6, 8, 10, 12]


def _record(path, rows, scale_row=None) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    if scale_row is not None:  # a fault on one batch row of lm_head's input
        def hook(m, a):
            x = a[0].clone()
            x[scale_row] *= 1.05
            return (x,)
        model.lm_head.register_forward_pre_hook(hook)
    with torch.no_grad(), inkling_probe.record(model, str(path), writer="inline"):
        model(input_ids=torch.tensor(rows), logits_to_keep=1)  # as generate's prefill: the last token only
    return str(path)


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("alone") / "d", [PROMPT])


def test_last_token_tensors_align_by_batch_row(alone, tmp_path):
    batch = _record(tmp_path / "batch", [OTHER, PROMPT])
    rep = compare(alone, batch, cand_row=1, explain=False)
    row = rep.row("lm_head.in.0")
    assert row.status in ("exact", "ok"), (row.status, row.note)
    assert not rep.diverged and not rep.unchecked, [(r.key, r.status, r.note) for r in rep.rows if r.diverged][:4]


def test_a_fault_on_the_compared_row_is_still_found(alone, tmp_path):
    batch = _record(tmp_path / "batch", [OTHER, PROMPT], scale_row=1)
    rep = compare(alone, batch, cand_row=1, explain=False)
    assert rep.diverged and rep.culprit.key == "lm_head.in.0", [(c.key, c.status) for c in rep.culprits]


def test_the_other_row_is_not_taken_for_the_prompt(alone, tmp_path):
    batch = _record(tmp_path / "batch", [OTHER, PROMPT])
    rep = compare(alone, batch, cand_row=0, explain=False)  # row 0 holds another prompt
    assert rep.diverged


def test_leading_dim_cut_needs_the_other_side_to_be_one_row():
    ref, cand = Values(np.zeros((1, 1, 4)), "float32"), Values(np.arange(8.0).reshape(2, 1, 4), "float32")
    conf = conform(ref, cand, {"token_dim": -1}, {"token_dim": -1}, None, 1)
    assert conf.cand.array.tolist() == [[[4.0, 5.0, 6.0, 7.0]]]
    with pytest.raises(ShapeMismatch) as e:  # 3 rows where the batch is 2: nothing cut, and it says so
        conform(Values(np.zeros((1, 4)), "float32"), Values(np.zeros((3, 4)), "float32"),
                {"token_dim": -1}, {"token_dim": -1}, None, 1, batches=(None, 2))
    msg = str(e.value)
    assert "[1, 4] vs [3, 4]" in msg and "batch" in msg and "\n" not in msg


def test_a_shape_row_keeps_its_reason(tmp_path):
    a = write(tmp_path / "ref", [[("x", torch.zeros(1, 4))]])
    b = write(tmp_path / "cand", [[("x", torch.zeros(3, 5))]])
    row = compare(a, b, cand_row=1, explain=False).row("x")
    assert row.status == "shape" and "[1, 4] vs [3, 5]" in row.note and "tried" in row.note


def _router_steps(logits, batch=None):
    """One step: router logits ``[N, E]`` and their top-2 ids, a declared decision with its scores."""
    kw = {"batch": batch} if batch else {}
    ids = torch.topk(logits, 2, dim=-1).indices
    return [[("layers.0.mlp.router_logits", logits, {"token_dim": 0, **kw}),
             ("layers.0.mlp.topk_idx", ids, {"token_dim": 0, "kind": "decision",
                                             "scores": "layers.0.mlp.router_logits", **kw})]]


def test_a_batch_candidates_router_scores_are_cut_to_its_row(tmp_path):
    """The candidate ran a batch of 2 ([2T, E] router logits): its decision's scores are read from its
    row, as its ids are, so a near-tie flip there is a near-tie (it read no scores and, against a
    control that changed nothing, scored inf)."""
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(16, 8, generator=g)
    order = torch.argsort(ref[5], descending=True)
    ref[5, order[2]] = ref[5, order[1]] - 1e-6  # token 5's 2nd and 3rd choice 1e-6 apart
    row = ref.clone()
    row[5, order[2]] = ref[5, order[1]] + 1e-6  # a noise-sized move swaps them
    cand = torch.cat([torch.randn(16, 8, generator=g), row])  # [2T, E]: another prompt, then this one
    a = write(tmp_path / "ref", _router_steps(ref))
    b = write(tmp_path / "cand", _router_steps(cand, batch=2))
    c = write(tmp_path / "ctl", _router_steps(ref * (1 + 1e-7)))
    rep = compare(a, b, control=c, cand_row=1, explain=False)
    d = rep.row("layers.0.mlp.topk_idx")
    assert d.decision and "near-tie" in d.note and not d.diverged, (d.score, d.note)

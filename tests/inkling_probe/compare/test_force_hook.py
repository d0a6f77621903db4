"""force_routing: a transformers MoE router takes the reference's ids, so the candidate has no flips."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

import inkling_probe  # noqa: E402
from inkling_probe.compare import compare  # noqa: E402
from inkling_probe.compare.force_hook import force_routing  # noqa: E402


def _model(dtype):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    cfg = Qwen2MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                         shared_expert_intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1,
                         mlp_only_layers=[0], norm_topk_prob=False, vocab_size=128, initializer_range=0.1)
    torch.manual_seed(0)
    return Qwen2MoeForCausalLM(cfg).to(dtype).eval()


def _record(model, path, ids, ref=None):
    ctx = force_routing(model, ref) if ref else torch.no_grad()
    with torch.no_grad(), ctx, inkling_probe.record(model, str(path), writer="inline"):
        inkling_probe.step()
        model(input_ids=ids)


def test_forced_candidate_has_the_references_ids(tmp_path):
    ids = torch.randint(0, 128, (1, 48), generator=torch.Generator().manual_seed(3))
    _record(_model(torch.float32), tmp_path / "ref", ids)
    cand = _model(torch.float32)
    with torch.no_grad():  # a candidate that routes differently: one expert's router row negated
        cand.model.layers[1].mlp.gate.weight[3] *= -1
    _record(cand, tmp_path / "free", ids)
    _record(cand, tmp_path / "forced", ids, ref=tmp_path / "ref")
    key = "model.layers.1.mlp.gate.2"
    free = compare(tmp_path / "ref", tmp_path / "free", explain=False).row(key)
    forced = compare(tmp_path / "ref", tmp_path / "forced", explain=False).row(key)
    assert "routed differently" in free.note and forced.status == "exact"


def test_no_router_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no module"):
        with force_routing(torch.nn.Linear(2, 2), tmp_path, routers=("*.gate",)):
            pass

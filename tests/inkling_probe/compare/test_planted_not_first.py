"""A registry fault on the real model whose culprit is not the first divergence (issue 41, item 7).

inkling_model tiny, ``renorm_rows`` (faults.py: rows 2 and 5 of layer 1's attn_norm normalised a
second time), recorded with and without the fault from one model, so every other difference is 0.
Its size at its own key is the spread of that norm's weight, set here close to ones so the fault sits
under its allowance there (score ~0.84); layer 1's attention is made peaky (q and k norm weights
x10), which amplifies the two rows' error past its allowance at the attention output. compare must
name the norm (born under its allowance), not the attention where the error first shows: the test
proves attribution, not first-crossing.
"""
import pytest
import torch

import inkling_probe
from inkling_probe.compare import compare

from hunts import IDS

pytestmark = pytest.mark.slow

FAULT = "renorm_rows"


def _pair(tmp_path, dtype, spread):
    """(reference, candidate) dumps of one model, the candidate with FAULT; layer 1's attn_norm
    weight moved to ``1 + spread * (w - 1)`` and its q/k norm weights x10 on both sides."""
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.checkpoint.weights import load_checkpoint
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.switches import faults

    config = InklingConfig.preset("tiny")
    ck = write_random_checkpoint(config, tmp_path / "ck")
    model = InklingForCausalLM(config, dtype=dtype)
    load_checkpoint(model, ck, config)
    layer = model.layers[faults.RENORM_LAYER]
    with torch.no_grad():
        w = layer.attn_norm.weight
        w.copy_(1 + spread * (w.float() - 1))
        layer.attn.q_norm.weight.mul_(10)  # peaky attention: the amplifier
        layer.attn.k_norm.weight.mul_(10)

    def run(name, fault):
        with faults.activate(fault), torch.no_grad(), inkling_probe.recording(str(tmp_path / name), writer="inline"):
            model(torch.tensor(IDS))
        return str(tmp_path / name)

    return run("ref", []), run("cand", [FAULT]), faults.location(FAULT, config)


def _attributed_not_first(rep, truth):
    culprit, first = rep.culprit, rep.first_divergence
    assert culprit is not None and (culprit.key, culprit.born) == (truth, "below_allowance"), \
        [(c.key, c.born) for c in rep.culprits]
    assert 0.75 <= culprit.score < 1 and not culprit.diverged  # under its allowance at its own key
    assert first is not None and first.key != truth and first.key.startswith("layers.1.attn.")
    assert first.score > 1.2  # the amplifier crosses with a margin


def test_renorm_rows_under_its_allowance_is_named_past_the_attention_that_amplifies_it(tmp_path):
    """fp32, no control (the dtype default judges): the norm's weight at 4.5e-4 of its spread."""
    ref, cand, truth = _pair(tmp_path, torch.float32, 4.5e-4)
    rep = compare(ref, cand, explain=False)
    assert truth == "layers.1.attn_norm"
    _attributed_not_first(rep, truth)
    assert [c.key for c in rep.culprits] == [truth]
    assert all(r.error == 0 for r in rep.rows if r.layer == 0)  # the pair differs by the fault alone


@pytest.mark.xfail(strict=True, reason="found: a residual add dilutes the attention's row errors so that only its "
                   "loudest row stays over allowance; the confined-rows relation then holds at layers.1.resid_attn "
                   "but not at its guessed feeders (off on rows 2, 8, 9, 10), and it is named a second culprit "
                   "(own_relation) of the same fault")
def test_renorm_rows_in_bf16_is_one_culprit(tmp_path):
    """The same in bf16 (the weight at 1.4x its spread, rounded to bf16): the norm is named first and
    alone; the attention and the residual after it are its consequences."""
    ref, cand, truth = _pair(tmp_path, torch.bfloat16, 1.4)
    rep = compare(ref, cand, explain=False)
    _attributed_not_first(rep, truth)
    assert [c.key for c in rep.culprits] == [truth]

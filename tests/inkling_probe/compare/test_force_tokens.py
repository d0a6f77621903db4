"""force_tokens around transformers' generate: the candidate is fed the reference's tokens, so every
decode step stays aligned and judged; its own different picks are decisions with their margins."""
import pytest
import torch

import inkling_probe
from inkling_probe.compare import compare
from inkling_probe.compare.force_tokens import decision, force_tokens, reference_tokens

NEW = 12  # decode steps
LAYER = "model.layers.1.mlp"  # where the candidate's decode-only fault is planted


def _model(dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _prompt():
    return torch.randint(3, 64, (1, 20), generator=torch.Generator().manual_seed(5))


def _generate(model, path, ref=None):
    """Record ``model.generate`` greedy into ``path`` (forced to ``ref``'s tokens when given)."""
    forced = None
    with torch.no_grad(), inkling_probe.record(model, path, writer="inline"):
        inkling_probe.step()
        if ref is None:
            out = model.generate(_prompt(), max_new_tokens=NEW, do_sample=False)
        else:
            with force_tokens(model, ref) as forced:
                out = model.generate(_prompt(), max_new_tokens=NEW, do_sample=False)
    return out[0, 20:].tolist(), forced


def _decode_only_scale(model, factor):
    """The MLP of layer 1 scaled on decode forwards only (one new token), as a decode-path bug is."""
    return model.model.layers[1].mlp.register_forward_hook(
        lambda m, a, out: out * factor if a[0].shape[1] == 1 else out)


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ft") / "ref")
    tokens, _ = _generate(_model(), path)
    return path, tokens


def test_the_reference_tokens_are_read_from_its_input_ids(ref):
    path, tokens = ref
    r = reference_tokens(path)
    assert r.prompt == _prompt()[0].tolist() and r.tokens == tokens and len(r.forwards) == NEW


def test_a_forced_candidate_emits_the_reference_tokens_and_notes_its_own_picks(ref, tmp_path):
    path, tokens = ref
    model = _model()
    _decode_only_scale(model, -1.0)  # gross: its own picks part from the reference's
    got, forced = _generate(model, str(tmp_path / "cand"), path)
    assert got == tokens
    assert forced.decisions and all(d["margin"] > 0 and d["own"] != d["forced"] for d in forced.decisions)
    assert model.generate.__func__ is type(model).generate  # restored on exit


def test_a_decode_only_fault_is_found_at_its_first_decode_step(ref, tmp_path):
    path, _ = ref
    model = _model()
    _decode_only_scale(model, 1.2)
    cand = str(tmp_path / "cand")
    _generate(model, cand, path)
    rep = compare(path, cand, explain=False)
    assert rep.diverged and not rep.unchecked
    assert rep.culprit.key.startswith(LAYER) and rep.culprit.step == 1  # the first decode forward (one step each)


def test_a_clean_forced_candidate_is_within_tolerance_at_every_step(ref, tmp_path):
    path, _ = ref
    cand = str(tmp_path / "cand")
    _generate(_model(), cand, path)
    rep = compare(path, cand, explain=False)
    assert not rep.diverged and not rep.unchecked
    assert {r.step for r in rep.rows} == set(range(NEW))  # record(model): each forward one step


def test_a_different_prompt_is_refused(ref):
    path, _ = ref
    model = _model()
    with force_tokens(model, path), pytest.raises(ValueError, match="prompt"):
        model.generate(_prompt()[:, :10], max_new_tokens=2, do_sample=False)


def test_decision_margin_is_the_top_logit_over_the_forced_ones():
    assert decision(3, [0.0, 2.0, 0.5], forced=2) == {"step": 3, "forced": 2, "own": 1, "margin": 1.5}
    assert decision(3, [0.0, 2.0, 0.5], forced=1) is None

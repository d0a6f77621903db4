"""Generation: greedy equals transformers' greedy generate; sampling is seeded; eos resolution order."""

import json
import warnings

import pytest
import torch

from inkling_model.config import InklingConfig
from inkling_model.generate import Eos, generate, resolve_eos
from inkling_model.model import InklingForCausalLM

from hf_util import hf_model, native_state


@pytest.fixture(scope="module")
def models():
    cfg = InklingConfig.preset("tiny")
    hf = hf_model(cfg, seed=7)
    ours = InklingForCausalLM(cfg)
    ours.load_weights(native_state(hf).items())
    return cfg, hf, ours


def test_greedy_equals_transformers(models):
    cfg, hf, ours = models
    prompt = [5, 77, 300, 12, 9, 400]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                          eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    got = generate(ours, [prompt], 12)[0]
    assert got.tokens == ref and got.finish_reason == "length"


def test_batch_equals_single_and_stops_at_eos(models):
    cfg, _, ours = models
    prompts = [[5, 77, 300, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    single = [generate(ours, [p], 10)[0].tokens for p in prompts]
    assert [g.tokens for g in generate(ours, prompts, 10)] == single
    end = single[0][3]  # make the 4th generated token of request 0 the end id
    out = generate(ours, prompts, 10, eos=Eos(end, (), "test"))
    assert out[0].tokens == single[0][:4] and out[0].finish_reason == "eos"
    stop = single[1][2]
    out = generate(ours, prompts, 10, eos=Eos(None, (stop,), "test"))
    assert out[1].tokens[-1] == stop and out[1].finish_reason == "stop"


def test_sampling_is_seeded(models):
    _, _, ours = models
    a = generate(ours, [[3, 4, 5]], 8, temperature=1.0, top_k=20, seed=1)[0].tokens
    b = generate(ours, [[3, 4, 5]], 8, temperature=1.0, top_k=20, seed=1)[0].tokens
    c = generate(ours, [[3, 4, 5]], 8, temperature=1.0, top_k=20, seed=2)[0].tokens
    assert a == b and a != c


class _Tok:
    eos_token_id = 42


def test_eos_resolution_order(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [7, 8, 7, 9]}))
    assert resolve_eos(ckpt_dir=tmp_path) == Eos(7, (8, 9), "config.json")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 11}))
    assert resolve_eos(ckpt_dir=tmp_path) == Eos(11, (), "generation_config.json")
    assert resolve_eos(tokenizer=_Tok(), ckpt_dir=tmp_path) == Eos(42, (), "tokenizer")
    assert resolve_eos(explicit=[3, 3, 4], tokenizer=_Tok(), ckpt_dir=tmp_path) == Eos(3, (4,), "explicit setting")
    assert resolve_eos(config=InklingConfig.preset("tiny")).end_id == 2


def test_no_eos_warns(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": None}))
    with pytest.warns(UserWarning, match="no end-of-sequence id"):
        eos = resolve_eos(ckpt_dir=tmp_path)
    assert eos.end_id is None and eos.ids == frozenset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_eos(explicit=5)

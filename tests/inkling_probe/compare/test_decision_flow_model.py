"""Issue 21's must-shows on inkling_model (tiny, seed 3) against transformers' Inkling: a late fault
after a near-tie flip is named, the benign long prompt exits 0 with its coverage stated, a prefill
fault read by decode steps is one culprit, and a forced-routing re-run has no flip at all."""
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

from inkling_probe.compare import compare  # noqa: E402

PROMPT = [(7 * i + 3) % 500 for i in range(256)]


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    path = tmp_path_factory.mktemp("ck") / "tiny_seed3"
    write_random_checkpoint(InklingConfig.preset("tiny"), str(path), seed=3)
    return str(path)


def _hf(ck, ids, dump):
    import inkling_probe
    from inkling_model.checkpoint.hf_reference import load_hf_model

    model = load_hf_model(ck, torch.float32)
    with torch.no_grad(), inkling_probe.record(model, str(dump), name_map="hf_inkling", writer="inline"):
        inkling_probe.step()
        model(input_ids=torch.tensor([ids]))


def _native(ck, ids, dump, fault_rows_from=None):
    import inkling_probe
    from inkling_model.config import InklingConfig
    from inkling_model.model import InklingForCausalLM
    from inkling_model.checkpoint.weights import load_checkpoint

    config = InklingConfig.from_pretrained(ck)
    model = InklingForCausalLM(config, dtype=torch.bfloat16)
    load_checkpoint(model, ck, config)
    if fault_rows_from is not None:
        norm = next(m for n, m in model.named_modules() if n.endswith("layers.4.attn_norm"))

        def hook(m, a, o):
            o = o.clone()
            o[fault_rows_from:] *= 1.5
            return o
        norm.register_forward_hook(hook)
    with torch.no_grad(), inkling_probe.recording(str(dump), writer="inline"):
        model(torch.tensor(ids))


def test_late_fault_after_a_near_tie_flip_is_named(ck, tmp_path):
    """80 tokens: a near-tie flip at token 2 of layer 3; layers.4.attn_norm x1.5 on rows >= 40
    passed with exit 0 when every token after a flip was set aside."""
    ids = PROMPT[:80]
    _hf(ck, ids, tmp_path / "ref")
    _native(ck, ids, tmp_path / "benign")
    _native(ck, ids, tmp_path / "fault", fault_rows_from=40)
    benign = compare(tmp_path / "ref", tmp_path / "benign", name_map="hf_inkling", explain=False)
    assert any("routed differently" in r.note for r in benign.rows if r.decision)  # there is a flip
    assert not benign.diverged and not benign.unchecked
    rep = compare(tmp_path / "ref", tmp_path / "fault", name_map="hf_inkling", explain=False)
    assert [c.key for c in rep.culprits] == ["layers.4.attn_norm"]


def test_benign_256_token_prompt_exits_0_with_its_coverage(ck, tmp_path):
    _hf(ck, PROMPT, tmp_path / "ref")
    _native(ck, PROMPT, tmp_path / "cand")
    rep = compare(tmp_path / "ref", tmp_path / "cand", name_map="hf_inkling", explain=False)
    cov = rep.coverage()
    assert not rep.diverged and not rep.unchecked
    assert cov["not_judged"].get("set aside", 0) > 0 and cov["rows_judged"] >= 0.95 * cov["rows_recorded"]


def _cli(*args):
    out = subprocess.run([sys.executable, "-m", "inkling_probe.cli", "run", *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_renorm_rows_with_two_decode_steps_is_one_culprit(ck, tmp_path):
    tokens = ",".join(map(str, PROMPT[:24]))
    _cli("--ckpt", ck, "--impl", "hf", "--tokens", tokens, "--max-new-tokens", "2", "--dump", str(tmp_path / "ref"))
    _cli("--ckpt", ck, "--tp", "2", "--fault", "renorm_rows", "--tokens", tokens, "--max-new-tokens", "2",
         "--dump", str(tmp_path / "cand"))
    rep = compare(tmp_path / "ref", tmp_path / "cand", name_map="hf_inkling", explain=False)
    assert [(c.key, c.step) for c in rep.culprits] == [("layers.1.attn_norm", 0)]


def test_force_routing_rerun_has_no_flip(ck, tmp_path):
    tokens = ",".join(map(str, PROMPT[:24]))
    _cli("--ckpt", ck, "--impl", "hf", "--tokens", tokens, "--max-new-tokens", "2", "--dump", str(tmp_path / "ref"))
    for name, extra in (("free", ()), ("forced", ("--force-routing", str(tmp_path / "ref")))):
        _cli("--ckpt", ck, "--dtype", "bf16", "--tokens", tokens, "--max-new-tokens", "2",
             "--dump", str(tmp_path / name), *extra)
    free = compare(tmp_path / "ref", tmp_path / "free", name_map="hf_inkling", explain=False)
    forced = compare(tmp_path / "ref", tmp_path / "forced", name_map="hf_inkling", explain=False)
    assert free.coverage()["not_judged"].get("set aside")  # bf16 flips near-ties here
    assert not forced.coverage()["not_judged"] and not forced.diverged

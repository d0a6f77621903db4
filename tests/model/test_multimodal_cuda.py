"""On a GPU (the lead's run; skipped without CUDA): decode by CUDA-graph replay after a multimodal
prefill equals eager decode, token for token and logits bit for bit (tiny bf16, image+audio prompt).

The prefill is the multimodal forward (towers, fusion, decoder) written into the runtime's pool
through :meth:`Runtime.prefill` with the multimodal model standing in for the text model for that
one forward; decode steps are the text decoder's (graphs or eager).
"""
import pytest
import torch

from inkling_model.config import InklingConfig
from inkling_model.multimodal.checkpoint import write_multimodal_checkpoint
from inkling_model.multimodal.config import MultimodalConfig
from inkling_model.multimodal.run import MediaOnce

from mm_util import build, prompt

pytestmark = pytest.mark.cuda
NEW = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    d = tmp_path_factory.mktemp("mmcuda")
    cfg = InklingConfig.preset("tiny")
    mm = MultimodalConfig.preset("tiny", cfg)
    ckpt = str(write_multimodal_checkpoint(cfg, mm, d / "ckpt", seed=0))
    model = build(ckpt, "bf16").to("cuda")
    ids, media = prompt(mm, "image+audio")
    return model, ids.tolist(), media


def _decode(model, ids, media, cuda_graph: bool):
    from inkling_model.runtime.runtime import Runtime

    rt = Runtime(model.llm, max_batch=1, max_len=len(ids) + NEW + 2, cuda_graph=cuda_graph,
                 enforce_eager=not cuda_graph)
    text_model, rt.model = rt.model, MediaOnce(model, media)  # the multimodal prefill, then text decode
    try:
        slots, logits = rt.prefill([ids])
    finally:
        rt.model = text_model
    tokens, out = [], [logits.float().cpu()]
    for _ in range(NEW):
        tokens.append(int(out[-1].argmax(-1)[0]))
        out.append(rt.decode([tokens[-1]], slots).float().cpu())
    return tokens, torch.cat(out)


def test_graph_replay_after_multimodal_prefill_equals_eager(setup):
    model, ids, media = setup
    eager_tokens, eager_logits = _decode(model, ids, media, cuda_graph=False)
    graph_tokens, graph_logits = _decode(model, ids, media, cuda_graph=True)
    print(f"\nmultimodal prefill ({len(ids)} tokens) then {NEW} decode steps: eager {eager_tokens}, "
          f"graph {graph_tokens}, max |logit diff| {float((eager_logits - graph_logits).abs().max()):.3g}")
    assert graph_tokens == eager_tokens
    assert torch.equal(graph_logits, eager_logits)

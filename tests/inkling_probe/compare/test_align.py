"""align.layer_of: the layer a key belongs to, never an input index or a module's tuple output."""
import pytest

from inkling_probe.compare.align import layer_of


@pytest.mark.parametrize("key, layer", [
    ("layers.3.attn.q", 3), ("model.layers.12.mlp.experts.5.down_proj", 12), ("model.layers.3", 3),
    ("transformer.h.2", 2), ("blk.4.ffn", 4), ("layers.1.mlp.gate.2", 1),
    ("lm_head.in.0", None), ("model.norm.in.0", None), ("model.embed_tokens.in.0", None),
    ("model.rotary_emb.0", None), ("model.rotary_emb.1", None), ("layers.2.attn.out.1", 2), ("embed", None),
])
def test_layer_of(key, layer):
    assert layer_of(key) == layer

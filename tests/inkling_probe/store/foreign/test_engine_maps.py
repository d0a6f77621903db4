"""The shipped engine maps (SGLang, vLLM, TensorRT-LLM Inkling) on synthetic TP=2 dumps named and laid
out as each engine's modules produce them: every mapped key must read back as the global tensor."""
import os

import numpy as np
import pytest
import torch

from inkling_probe.store.namemap import NameMap
from inkling_probe.store.foreign import open_foreign
from inkling_probe.store.foreign.sglang_format import SGLangDumpWriter

TP, T = 2, 5
# a small Inkling: 4 q heads x 16, 1 kv head x 16 on full layers, 2 on sliding ones, d_rel 4, hidden 12
PARAMS = {"q_width": 64, "kv_width_full": 16, "kv_width_sliding": 32, "r_width": 16}
H, INTER = 12, 8
FULL, SLIDING, DENSE, MOE = 5, 2, 0, 2


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _truth(layer):
    kv = PARAMS["kv_width_full"] if layer == FULL else PARAMS["kv_width_sliding"]
    s = 100 * layer
    return {"q": _t(T, PARAMS["q_width"], seed=s), "k": _t(T, kv, seed=s + 1), "v": _t(T, kv, seed=s + 2),
            "r": _t(T, PARAMS["r_width"], seed=s + 3), "gate": _t(T, INTER, seed=s + 4), "up": _t(T, INTER, seed=s + 5),
            "experts": _t(T, H, seed=s + 6).double(), "shared": _t(T, H, seed=s + 7).double(),
            "o": _t(T, H, seed=s + 8), "sconv": _t(T, H, seed=s + 9), "norm": _t(T, H, seed=s + 10),
            "resid": _t(T, H, seed=s + 11), "resid_attn": _t(T, H, seed=s + 12),
            "vconv": _t(T, kv, seed=s + 13), "qn": _t(T, 4, 16, seed=s + 14)}


def _shard(x, rank, dim=-1):
    return x.chunk(TP, dim=dim)[rank].clone()


def _partial(x, rank):
    return x * 0.25 if rank == 0 else x * 0.75


def _interleave(g, u):
    return torch.stack([g, u], dim=-1).flatten(-2)  # [.., g0, u0, g1, u1, ...]


def _sglang(root):
    w = SGLangDumpWriter(root, world_size=TP)
    for layer in (DENSE, SLIDING, FULL):
        t = _truth(layer)
        p = f"non_intrusive__model.layers.{layer}"
        for rank in range(TP):
            w.dump(f"{p}.attn_norm.output.0", t["norm"], rank=rank, layer_id=layer)
            w.dump(f"{p}.attn_norm.output.1", t["resid"], rank=rank, layer_id=layer)
            qkvr = torch.cat([_shard(t[k], rank) for k in ("q", "k", "v", "r")], -1)
            w.dump(f"{p}.attn.qkvr.output", qkvr, rank=rank, layer_id=layer)
            w.dump(f"{p}.attn.v_sconv.output", _shard(t["vconv"], rank), rank=rank, layer_id=layer)
            w.dump(f"{p}.attn.q_norm.output", _shard(t["qn"], rank, 1), rank=rank, layer_id=layer)
            w.dump(f"{p}.attn.wo_ud.output", t["o"], rank=rank, layer_id=layer)
            w.dump(f"{p}.mlp_norm.output.1", t["resid_attn"], rank=rank, layer_id=layer)
            if layer == DENSE:
                gu = _interleave(_shard(t["gate"], rank), _shard(t["up"], rank))
                w.dump(f"{p}.mlp.gate_up_proj.output", gu, rank=rank, layer_id=layer)
                w.dump(f"{p}.mlp.down_proj.output", _partial(t["experts"], rank), rank=rank, layer_id=layer)
            else:
                w.dump(f"{p}.mlp.experts.output", _partial(t["experts"], rank), rank=rank, layer_id=layer)
                w.dump(f"{p}.mlp.shared_experts.output", _partial(t["shared"], rank), rank=rank, layer_id=layer)
                w.dump(f"{p}.mlp.gate.output.1", torch.arange(T * 2).reshape(T, 2), rank=rank, layer_id=layer)
            w.dump(f"{p}.inputs.0", t["norm"], rank=rank, layer_id=layer)
    return {"map": "sglang_inkling", "pattern": None}


def _hooks(root, names_of):
    """Forward hooks saving torch.save(output) per rank: ``rank<r>/<module path>.pt``."""
    for layer in (DENSE, SLIDING, FULL):
        t = _truth(layer)
        for rank in range(TP):
            os.makedirs(root / f"rank{rank}", exist_ok=True)
            for name, value in names_of(layer, t, rank).items():
                torch.save(value, root / f"rank{rank}" / f"model.layers.{layer}.{name}.pt")
    return {"pattern": r"rank(?P<rank>\d+)/(?P<key>.+)\.pt"}


def _vllm(root):
    def names(layer, t, rank):
        out = {"attn.qkvr": (torch.cat([_shard(t[k], rank) for k in ("q", "k", "v", "r")], -1), None),
               "attn.wo_ud": (_partial(t["o"].double(), rank), None), "attn_sconv": _shard(t["sconv"], rank)}
        if layer == DENSE:
            out["mlp.gate_up_proj"] = (_interleave(_shard(t["gate"], rank), _shard(t["up"], rank)), None)
        else:
            out["mlp.experts"] = _partial(t["experts"], rank)
            out["mlp.sink_experts"] = _partial(t["shared"], rank)  # InklingMoE.sink_experts
        return out
    return {**_hooks(root, names), "map": "vllm_inkling"}


def _trtllm(root):
    def names(layer, t, rank):
        out = {"attn.qkv_proj": torch.cat([_shard(t[k], rank) for k in ("q", "k", "v")], -1),
               "attn.r_proj": _shard(t["r"], rank), "attn.v_sconv": _shard(t["vconv"], rank),
               "attn.o_proj": t["o"], "attn": t["o"], "attn_sconv": t["sconv"], "output": t["resid"]}
        if layer == DENSE:
            out["mlp.gate_up_proj"] = torch.cat([_shard(t["gate"], rank), _shard(t["up"], rank)], -1)
        else:
            out["mlp.experts"] = t["experts"]
            out["mlp.shared_experts"] = t["shared"]
        return out
    return {**_hooks(root, names), "map": "trtllm_inkling"}


def _hf(layer, part):
    return f"model.layers.{layer}.self_attn.{part}" if part != "r" else f"layers.{layer}.attn.r"


EXPECT = {  # engine -> (key -> (truth name, layers))
    "sglang": {**{_hf("{L}", p): (k, "all") for p, k in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("r", "r"))},
               "layers.{L}.attn.v": ("vconv", "all"), "layers.{L}.attn.q": ("qn", "all"),
               "layers.{L}.attn.o_proj": ("o", "all"), "layers.{L}.attn_norm": ("norm", "all"),
               "layers.{P}.resid": ("resid", "after0"), "layers.{L}.resid_attn": ("resid_attn", "all"),
               "model.layers.{L}.mlp.gate_proj": ("gate", "dense"), "model.layers.{L}.mlp.up_proj": ("up", "dense"),
               "model.layers.{L}.mlp.down_proj": ("experts", "dense"),
               "layers.{L}.mlp.experts": ("experts", "moe"), "layers.{L}.mlp.shared": ("shared", "moe")},
    "vllm": {**{_hf("{L}", p): (k, "all") for p, k in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("r", "r"))},
             "layers.{L}.attn.o_proj": ("o", "all"), "layers.{L}.attn_sconv": ("sconv", "all"),
             "model.layers.{L}.mlp.gate_proj": ("gate", "dense"), "model.layers.{L}.mlp.up_proj": ("up", "dense"),
             "layers.{L}.mlp.experts": ("experts", "moe"), "layers.{L}.mlp.shared": ("shared", "moe")},
    "trtllm": {**{_hf("{L}", p): (k, "all") for p, k in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"))},
               "layers.{L}.attn.r": ("r", "all"), "layers.{L}.attn.v": ("vconv", "all"),
               "layers.{L}.attn.o_proj": ("o", "all"), "layers.{L}.attn_sconv": ("sconv", "all"),
               "layers.{L}.resid": ("resid", "all"),
               "model.layers.{L}.mlp.gate_proj": ("gate", "dense"), "model.layers.{L}.mlp.up_proj": ("up", "dense"),
               "layers.{L}.mlp.experts": ("experts", "moe"), "layers.{L}.mlp.shared": ("shared", "moe")},
}
WRITERS = {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm}


@pytest.mark.parametrize("engine", list(WRITERS))
def test_engine_map_reassembles_every_key(tmp_path, engine):
    how = WRITERS[engine](tmp_path / engine)
    d = open_foreign(tmp_path / engine, name_map=how["map"], pattern=how["pattern"], params=PARAMS)
    assert d.world_size == TP
    checked = 0
    for layer in (DENSE, SLIDING, FULL):
        for template, (name, which) in EXPECT[engine].items():
            if (which == "dense" and layer != DENSE) or (which == "moe" and layer == DENSE) or \
                    (which == "after0" and layer == 0):
                continue
            key = template.format(L=layer, P=layer - 1)
            want = _truth(layer)[name]
            got = d.array(key)
            np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-12 if want.dtype == torch.float64 else 0,
                                       err_msg=f"{engine} {key}")
            checked += 1
    assert checked >= 20
    assert not any(".inputs." in k or k.endswith(".attn") for k in d.keys()), d.keys()


def test_sglang_routing_decision_is_declared(tmp_path):
    _sglang(tmp_path / "s")
    d = open_foreign(tmp_path / "s", name_map="sglang_inkling", params=PARAMS)
    assert d.rows("layers.2.mlp.topk_idx")[0]["meta"]["kind"] == "decision"


def test_wrong_params_are_named_not_misread(tmp_path):
    _sglang(tmp_path / "s")
    d = open_foreign(tmp_path / "s", name_map="sglang_inkling")  # the production sizes on a small model
    with pytest.raises(Exception, match="does not split in ratio"):
        d.array("model.layers.2.self_attn.q_proj")


@pytest.mark.parametrize("name", ["sglang_inkling", "vllm_inkling", "trtllm_inkling"])
def test_engine_maps_leave_canonical_keys_alone(name):
    """An engine map applied again (compare --map) must not rename keys already canonical."""
    nm = NameMap.load(name)
    for key in ("embed", "layers.3.attn.q", "layers.3.attn.o_proj", "layers.3.mlp.experts", "layers.3.resid",
                "model.layers.3.self_attn.q_proj", "norm", "logits"):
        assert nm.apply(key) == key, (name, key, nm.apply(key))


def test_a_split_rule_is_refused_where_only_renames_apply():
    """compare --map renames keys; a rule that splits a tensor only works when the dump is read."""
    from inkling_probe.errors import SettingsError

    nm = NameMap.load("sglang_inkling")
    with pytest.raises(SettingsError, match="splits 'model.layers.2.attn.qkvr' into parts"):
        nm.apply("model.layers.2.attn.qkvr")


def test_expert_weight_layouts_meet_the_native_checkpoint(tmp_path):
    """Routed experts' w13 as the native checkpoint stores it (interleaved [E, 2I, H]), as SGLang's bf16
    FusedMoE holds it per rank (interleaved slices) and as vLLM's does ([gate_r ; up_r], de-interleaved):
    all three read as the same w1 (gate), w3 (up) and w2."""
    from safetensors.torch import save_file

    E, I, Hd = 4, 6, 5
    gate, up, w2 = _t(E, I, Hd, seed=1), _t(E, I, Hd, seed=2), _t(E, Hd, I, seed=3)
    native = torch.stack([gate, up], dim=2).reshape(E, 2 * I, Hd)  # rows g0, u0, g1, u1, ...
    save_file({"model.llm.layers.3.mlp.experts.w13_weight": native,
               "model.llm.layers.3.mlp.experts.w2_weight": w2.contiguous()}, tmp_path / "ck.safetensors")
    w = SGLangDumpWriter(tmp_path / "sglang", world_size=TP)
    for rank in range(TP):
        g, u = _shard(gate, rank, 1), _shard(up, rank, 1)
        w.dump("param__model.layers.3.mlp.experts.w13_weight", torch.stack([g, u], 2).reshape(E, -1, Hd), rank=rank)
        w.dump("param__model.layers.3.mlp.experts.w2_weight", _shard(w2, rank, 2), rank=rank)
        os.makedirs(tmp_path / "vllm" / f"rank{rank}", exist_ok=True)
        torch.save(torch.cat([g, u], 1), tmp_path / "vllm" / f"rank{rank}" / "model.layers.3.mlp.experts.w13_weight.pt")
        torch.save(_shard(w2, rank, 2), tmp_path / "vllm" / f"rank{rank}" / "model.layers.3.mlp.experts.w2_weight.pt")
    dumps = [open_foreign(tmp_path / "ck.safetensors", name_map="inkling_native"),
             open_foreign(tmp_path / "sglang", name_map="sglang_inkling"),
             open_foreign(tmp_path / "vllm", name_map="vllm_inkling", pattern=r"rank(?P<rank>\d+)/(?P<key>.+)\.pt")]
    for d in dumps:
        for key, want in (("layers.3.mlp.experts.w1", gate), ("layers.3.mlp.experts.w3", up), ("layers.3.mlp.experts.w2", w2)):
            np.testing.assert_array_equal(d.array(key), want.numpy(), err_msg=f"{d.path} {key}")
            assert d.rows(key)[0]["token_dim"] == -1

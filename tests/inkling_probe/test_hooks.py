"""Module capture on a plain torch model and on transformers' Inkling; hooks never outlive it."""
import pytest
import torch

import inkling_probe
import tiny_hf
from inkling_probe.hooks import flatten


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, scale=None):
        y = self.proj(x)
        return y * scale, {"pre": y}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        y, extra = self.block(x, scale=torch.tensor(2.0))
        return self.head(y + extra["pre"])


def _hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_plain_module_outputs_inputs_and_flattening(tmp_path):
    torch.manual_seed(0)
    net, x = Net(), torch.randn(3, 4)
    with torch.no_grad(), inkling_probe.record(net, tmp_path / "d"):
        out = net(x)
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == ["in.0", "block.in.0", "block.in.scale", "block.proj.in.0", "block.proj",
                        "block.0", "block.1.pre", "head.in.0", "head", "output"]
    with torch.no_grad():
        pre = net.block.proj(x)
    assert torch.equal(d.tensor("block.proj"), pre)
    assert torch.equal(d.tensor("block.0"), pre * 2)
    assert torch.equal(d.tensor("output"), out)
    assert d.tensor("block.in.scale").item() == 2.0
    assert _hooks(net) == 0


def test_include_globs_and_outputs_only(tmp_path):
    net = Net()
    with torch.no_grad(), inkling_probe.record(net, tmp_path / "d", include="block*", inputs=False):
        net(torch.randn(2, 4))
    assert inkling_probe.open(tmp_path / "d").keys() == ["block.proj", "block.0", "block.1.pre"]


def test_hooks_removed_when_forward_raises(tmp_path):
    net = Net()
    with pytest.raises(RuntimeError):
        with inkling_probe.record(net, tmp_path / "d"):
            net(torch.randn(2, 5))  # wrong width: the first Linear raises
    assert _hooks(net) == 0 and not inkling_probe.enabled()
    assert inkling_probe.open(tmp_path / "d").keys() == ["in.0", "block.in.0", "block.in.scale", "block.proj.in.0"]


def test_token_slice_applies_to_the_declared_dim(tmp_path):
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 6, 4)  # [B, T, C]
    with torch.no_grad(), inkling_probe.record(lin, tmp_path / "d", token_dim=1, tokens="-2:", inputs=False):
        y = lin(x)
    assert torch.equal(inkling_probe.open(tmp_path / "d").tensor("output"), y[:, -2:])


def test_record_without_path_needs_recording_on():
    with pytest.raises(RuntimeError, match="needs recording on"):
        with inkling_probe.record(Net()):
            pass


def test_flatten_keys():
    t = torch.zeros(1)
    assert [k for k, _ in flatten((t, [t, {"a": t, "b": None}]), "m")] == ["m.0", "m.1.0", "m.1.1.a"]
    assert [k for k, _ in flatten(t, "")] == [""]


def _tiny_hf_inkling():
    return tiny_hf.inkling()


def test_transformers_inkling_every_module_and_logits(tmp_path):
    model = _tiny_hf_inkling()
    ids = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        want = model(ids).logits
        with inkling_probe.record(model, tmp_path / "d", inputs=False):
            model(ids)
    d = inkling_probe.open(tmp_path / "d")
    keys = set(d.keys())
    assert torch.equal(d.tensor("logits"), want)  # the root ModelOutput's field
    recorded_modules = {k for k in keys if k.startswith("model.layers.")}
    for i in range(6):
        assert f"model.layers.{i}.mlp" in keys or f"model.layers.{i}.mlp.0" in keys, i
    assert len(recorded_modules) > 60
    assert _hooks(model) == 0


def test_transformers_inkling_with_a_name_map(tmp_path):
    model = _tiny_hf_inkling()
    rules = tmp_path / "map.toml"
    rules.write_text("drop_unmatched = true\n[[rule]]\nmatch = 'model\\.layers\\.(\\d+)\\.mlp'\nto = 'layers.\\1.mlp.out'\n"
                     "[[rule]]\nmatch = 'logits'\nto = 'logits'\n")
    with torch.no_grad(), inkling_probe.record(model, tmp_path / "d", inputs=False, name_map=rules):
        model(torch.randint(0, 256, (1, 12)))
    assert inkling_probe.open(tmp_path / "d").keys() == [f"layers.{i}.mlp.out" for i in range(6)] + ["logits"]


class Tokens(torch.nn.Module):
    """Row-independent: each batch row's values are what it would be alone."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, ids):
        h = self.embed(ids)  # [B, T, 4]
        flat = self.proj(h.reshape(-1, 4))  # [B*T, 4]
        return flat.reshape(ids.shape[0], ids.shape[1], 4).transpose(1, 2)  # [B, 4, T]


def _rows(d):
    return {(r["key"], int(r["token_dim"])) for r in d.index}


def test_batch_row_records_as_if_that_prompt_ran_alone(tmp_path):
    torch.manual_seed(0)
    net, ids = Tokens(), torch.randint(0, 16, (3, 5))
    with torch.no_grad(), inkling_probe.record(net, tmp_path / "row", batch_row=1):
        net(ids)
    with torch.no_grad(), inkling_probe.record(net, tmp_path / "alone"):
        net(ids[1:2])
    row, alone = inkling_probe.open(tmp_path / "row"), inkling_probe.open(tmp_path / "alone")
    assert row.keys() == alone.keys() == ["in.0", "embed.in.0", "embed", "proj.in.0", "proj", "output"]
    for key in row.keys():
        assert torch.equal(row.tensor(key), alone.tensor(key)), key
    assert _rows(row) == _rows(alone) == {("in.0", 1), ("embed.in.0", 1), ("embed", 1), ("proj.in.0", 0),
                                          ("proj", 0), ("output", 2)}
    assert _hooks(net) == 0


def test_batch_row_out_of_range_is_one_line(tmp_path):
    net = Tokens()
    with pytest.raises(ValueError, match=r"record\(batch_row=3\): the input has 3 rows"):
        with torch.no_grad(), inkling_probe.record(net, tmp_path / "d", batch_row=3):
            net(torch.zeros(3, 5, dtype=torch.long))
    assert _hooks(net) == 0
    with pytest.raises(ValueError, match="expected a row index >= 0"):
        with inkling_probe.record(Tokens(), tmp_path / "e", batch_row=-1):
            pass


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def _generate(model, path, **kw):
    with torch.no_grad(), inkling_probe.record(model, str(path), writer="inline", **kw):
        model.generate(torch.tensor([[3, 5, 7, 9, 11, 13, 15, 17]]), max_new_tokens=5, do_sample=False,
                       pad_token_id=0)
    return inkling_probe.open(str(path))


def test_each_forward_of_generate_is_one_step(tmp_path):
    """record(model) around generate: step 0 the prefill (8 tokens), steps 1..4 one decode token each."""
    d = _generate(_tiny_llama(), tmp_path / "d")
    assert d.steps("lm_head") == [0, 1, 2, 3, 4]
    assert d.array("model.embed_tokens", step=0).shape[1] == 8
    assert all(d.array("model.embed_tokens", step=s).shape[1] == 1 for s in range(1, 5))


def test_a_caller_that_steps_is_not_stepped_twice(tmp_path):
    model = _tiny_llama()
    model.register_forward_pre_hook(lambda m, a: inkling_probe.step())  # before record's hooks
    d = _generate(model, tmp_path / "d")
    assert d.steps("lm_head") == [0, 1, 2, 3, 4]


def test_manual_steps_keep_every_forward_in_step_zero_as_calls(tmp_path):
    d = _generate(_tiny_llama(), tmp_path / "d", steps="manual")
    assert d.steps("lm_head") == [0]
    with pytest.raises(ValueError, match="steps='each'"):
        with inkling_probe.record(_tiny_llama(), str(tmp_path / "e"), steps="each"):
            pass

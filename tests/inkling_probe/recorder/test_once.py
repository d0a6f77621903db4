"""Each tensor stored once a step (recorder/once.py, store/refs.py): references read as their targets."""
import os

import h5py
import numpy as np
import pytest
import torch

import inkling_probe
import tiny_hf
from inkling_probe.store import schema
from inkling_probe.store.refs import view_hash


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval(), torch.randint(0, 64, (2, 12))


def _record(model, ids, path, steps=2, **settings):
    with torch.no_grad(), inkling_probe.record(model, str(path), **settings):
        for _ in range(steps):
            inkling_probe.step()
            model(input_ids=ids)
    return inkling_probe.open(str(path))


def _bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.endswith(".h5"))


def _inkling():
    return tiny_hf.inkling(layers=2), torch.randint(0, 256, (2, 12))


@pytest.mark.parametrize("writer", ["inline", "process"])
@pytest.mark.parametrize("make, views_at_least", [(_llama, 0), (_inkling, 4)], ids=["llama", "inkling"])
def test_defaults_read_the_same_values_in_fewer_bytes(tmp_path, writer, make, views_at_least):
    """Inkling's q_norm / k_norm inputs are q_proj's / k's outputs viewed as heads: references of their own shape."""
    model, ids = make()
    once = _record(model, ids, tmp_path / "once", writer=writer)
    again = _record(model, ids, tmp_path / "again", writer=writer, once=False)
    rows = once.index
    assert [(r["key"], r["step"], r["call"]) for r in rows] == \
           [(r["key"], r["step"], r["call"]) for r in again.index]
    refs = [r for r in rows if r["ref"]]
    assert len(refs) > len(rows) // 4  # most inputs are an earlier output
    assert not any(r["ref"] for r in again.index)
    for r, s in zip(rows, again.index):
        a, b = once.array(r["key"], r["step"], call=r["call"]), again.array(s["key"], s["step"], call=s["call"])
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), r["key"]
        assert r["dtype"] == s["dtype"]
    views = 0
    for r, s in zip(rows, again.index):  # a reference names an earlier key of its own step, and points at its bytes
        if not r["ref"]:
            assert r["hash"] == s["hash"]  # compare's same-bits shortcut holds
            continue
        target = next(t for t in rows if (t["key"], t["call"]) == schema.parse_ref(r["ref"]) and t["step"] == r["step"])
        assert target["seq"] < r["seq"] and not target["ref"]
        assert (r["dataset"], r["offset"]) == (target["dataset"], target["offset"])
        if r["shape"] == target["shape"]:
            assert r["hash"] == s["hash"]
        else:  # a reshaped view: the same bytes, its own shape and hash
            views += 1
            own = view_hash(target["hash"], r["dtype"], schema.shape_text(r["shape"])).decode()
            assert r["numel"] == target["numel"] and r["hash"] == own
            assert r["hash"] != s["hash"] and r["hash"] != target["hash"]
    assert views >= views_at_least
    assert _bytes(tmp_path / "once") < 0.8 * _bytes(tmp_path / "again")
    if writer == "inline":  # compare, ls and show read references as their targets
        from click.testing import CliRunner

        from inkling_probe.cli import group

        ref = next(r for r in refs if r["key"].endswith(".in.0"))
        for args in (["compare", str(tmp_path / "once"), str(tmp_path / "again")], ["ls", str(tmp_path / "once")],
                     ["show", str(tmp_path / "once"), ref["key"]]):
            out = CliRunner().invoke(group, args)
            assert out.exit_code == 0, (args, out.output)


def test_plain_h5py_follows_a_reference(tmp_path):
    model, ids = _llama()
    d = _record(model, ids, tmp_path / "d", steps=1, writer="inline")
    row = next(r for r in d.index if r["ref"] and r["key"].endswith(".in.0"))
    seg = d.segments[0].path
    with h5py.File(seg, "r") as f:
        index = f["index"][()]
        raw = next(x for x in index if x["key"].decode() == row["key"])
        ds = f[raw["dataset"].decode()]
        values = ds[()] if raw["offset"] < 0 else ds[raw["offset"]: raw["offset"] + raw["numel"]]
    np.testing.assert_array_equal(values.reshape(row["shape"]), d.array(row["key"]))


def test_in_place_change_is_stored_again_and_steps_never_refer_back(tmp_path):
    x = torch.ones(8, 8)
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline"):
        inkling_probe.probe("a", x)
        inkling_probe.probe("b", x)  # the same tensor: a reference
        inkling_probe.probe("v", x.view(64))  # a reshaped view (same bytes, same order): a reference
        inkling_probe.probe("t", x.t())  # transposed (other order): stored
        inkling_probe.probe("h", x.view(torch.int32))  # another dtype: stored
        inkling_probe.probe("e", x[:1].expand(8, 8))  # expanded: stored
        x.add_(1)  # the version counter moves
        inkling_probe.probe("c", x)
        inkling_probe.probe("d", x[2:4])  # a view (another offset): stored
        inkling_probe.step()
        inkling_probe.probe("a", x)  # step 1: stored again, never a reference to step 0
        inkling_probe.probe("b", x)
    d = inkling_probe.open(str(tmp_path / "d"))
    refs = {(r["key"], r["step"]): r["ref"] for r in d.index}
    assert refs == {("a", 0): "", ("b", 0): "a", ("v", 0): "a", ("t", 0): "", ("h", 0): "", ("e", 0): "",
                    ("c", 0): "", ("d", 0): "", ("a", 1): "", ("b", 1): "a"}
    assert d.array("b").sum() == 64 and d.array("c").sum() == 128 and d.array("b", step=1).sum() == 128
    assert d.array("v").shape == (64,) and d.array("v").sum() == 64
    v, a = d.rows("v")[0], d.rows("a")[0]
    assert v["hash"] == view_hash(a["hash"], "float32", "64").decode() != a["hash"]


def test_views_that_walk_memory_in_the_same_order(tmp_path):
    """A transposed tensor viewed as heads (k_norm's input in transformers' Inkling) is the same bytes
    as the transposed tensor: a reference; viewed back through another transpose it is not."""
    conv = torch.randn(1, 8, 6).transpose(1, 2)  # [1, 6, 8], not contiguous
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline"):
        inkling_probe.probe("conv", conv)
        inkling_probe.probe("heads", conv.view(1, 6, 2, 4))  # the last dim split: same walk
        inkling_probe.probe("base", conv.transpose(1, 2))  # [1, 8, 6] contiguous: another order
        inkling_probe.probe("rows", conv.expand(3, 6, 8))  # expanded: other values
        inkling_probe.probe("rows2", conv.expand(3, 6, 8).reshape(3, 48))  # a copy (reshape cannot view)
    d = inkling_probe.open(str(tmp_path / "d"))
    assert {r["key"]: r["ref"] for r in d.index} == {"conv": "", "heads": "conv", "base": "", "rows": "",
                                                     "rows2": ""}
    np.testing.assert_array_equal(d.array("heads"), conv.view(1, 6, 2, 4).numpy())
    np.testing.assert_array_equal(d.array("base"), conv.transpose(1, 2).numpy())
    np.testing.assert_array_equal(d.array("rows"), conv.expand(3, 6, 8).numpy())


def test_walk():
    from inkling_probe.recorder.once import walk

    x = torch.zeros(2, 3, 4)
    assert walk(x.shape, x.stride()) == walk((6, 4), (4, 1)) == walk((1, 24), (24, 1)) == ((24, 1),)
    assert walk(x.transpose(0, 1).shape, x.transpose(0, 1).stride()) == ((3, 4), (2, 12), (4, 1))
    assert walk((3, 4), (0, 1)) == ((3, 0), (4, 1)) and walk((3, 4), (0, 0)) == ((12, 0),)


def test_a_view_first_then_its_base(tmp_path):
    """Either order: the base recorded after a reshaped view of it is a reference to the view."""
    x = torch.arange(24.0)
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline"):
        inkling_probe.probe("heads", x.view(2, 3, 4))
        inkling_probe.probe("flat", x)
        inkling_probe.probe("rows", x.view(6, 4))
    d = inkling_probe.open(str(tmp_path / "d"))
    assert [(r["key"], r["ref"]) for r in d.index] == [("heads", ""), ("flat", "heads"), ("rows", "heads")]
    for key, shape in (("heads", (2, 3, 4)), ("flat", (24,)), ("rows", (6, 4))):
        np.testing.assert_array_equal(d.array(key), x.view(shape).numpy())


def test_freed_storage_at_the_same_address_is_not_a_reference(tmp_path):
    """A freed tensor's address reused by a new one with the same layout and version: not the same."""
    seen = {}
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline"):
        for i in range(20):
            t = torch.full((64, 64), float(i))
            seen.setdefault(t.untyped_storage().data_ptr(), []).append(i)
            inkling_probe.probe(f"t{i}", t)
            del t
    assert any(len(v) > 1 for v in seen.values())  # the allocator did reuse an address
    d = inkling_probe.open(str(tmp_path / "d"))
    assert not any(r["ref"] for r in d.index)
    assert [float(d.array(f"t{i}")[0, 0]) for i in range(20)] == [float(i) for i in range(20)]


def test_target_in_an_earlier_segment_is_found_by_ref(tmp_path):
    """A size split between a tensor and its reference: the reference is followed by name."""
    big = torch.randn(256, 1024)  # 1 MiB: past INKLING_PROBE_SEGMENT_MB=0.5
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline", segment_mb=0.5):
        inkling_probe.probe("big", big)
        inkling_probe.probe("filler", torch.randn(256, 1024))
        inkling_probe.probe("again", big)
        inkling_probe.probe("flat", big.view(-1))
    d = inkling_probe.open(str(tmp_path / "d"))
    row, flat = d.rows("again")[0], d.rows("flat")[0]
    assert row["ref"] == "big" and flat["ref"] == "big" and len(d.segments) >= 2
    np.testing.assert_array_equal(d.array("again"), big.numpy())
    np.testing.assert_array_equal(d.array("flat"), big.view(-1).numpy())
    assert row["hash"] == d.rows("big")[0]["hash"]
    assert flat["hash"] == view_hash(row["hash"], "float32", str(big.numel())).decode()


def test_dumps_before_ref_still_read(tmp_path):
    """An index without the ``ref`` field (every dump written before it) reads as before."""
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline"):
        inkling_probe.probe("a", torch.arange(6.0))
    (seg,) = [os.path.join(tmp_path / "d", n) for n in os.listdir(tmp_path / "d") if n.endswith(".h5")]
    for n in os.listdir(tmp_path / "d"):
        if n.endswith(".index"):
            os.remove(os.path.join(tmp_path / "d", n))
    with h5py.File(seg, "r+") as f:
        old = f["index"][()]
        fields = [n for n in old.dtype.names if n != "ref"]
        del f["index"]
        f.create_dataset("index", data=old[fields].astype(np.dtype([(n, old.dtype[n]) for n in fields])))
    d = inkling_probe.open(str(tmp_path / "d"))
    assert d.rows("a")[0]["ref"] == ""
    np.testing.assert_array_equal(d.array("a"), np.arange(6.0, dtype=np.float32))

"""Foreign dumps read as dumps: every format, told by content, values bit-exact, ranks and steps from
names, and layouts from a name map."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.errors import DumpError
from inkling_probe.store.namemap import NameMap
from inkling_probe.store.foreign import open_foreign
from inkling_probe.store.foreign.dump import ForeignDump
from inkling_probe.store.foreign.sglang_format import SGLangDumpWriter

LAYOUT_MAP = """
[foreign]
token_dim = 0
[[rule]]
match = 'hidden\\.layer_id=(\\d+)'
to = 'layers.\\1.resid'
shard = "replicated"
[[rule]]
match = 'attn_out\\.layer_id=(\\d+)'
to = 'layers.\\1.attn.out'
shard = "concat"
dim = 1
[[rule]]
match = 'mlp_partial\\.layer_id=(\\d+)'
to = 'layers.\\1.mlp.out'
shard = "partial"
"""


def _tensors(step):
    g = torch.Generator().manual_seed(step)
    hidden = torch.randn(5, 8, generator=g).bfloat16()
    attn = torch.randn(5, 6, generator=g)
    mlp = torch.randn(5, 8, generator=g, dtype=torch.float64)
    return hidden, attn, mlp


def _write_sglang(root, layout):
    w = SGLangDumpWriter(root, world_size=2, layout=layout)
    for step in range(2):
        hidden, attn, mlp = _tensors(step)
        for rank in range(2):
            w.dump("hidden", hidden, rank=rank, step=step, layer_id=3)
            w.dump("attn_out", attn[:, 3 * rank: 3 * rank + 3].clone(), rank=rank, step=step, layer_id=3)
            w.dump("mlp_partial", mlp / 2, rank=rank, step=step, layer_id=3)
    return str(root)


@pytest.mark.parametrize("layout", ["current", "legacy"])
def test_sglang_dumper_folder_reassembles_through_the_map(tmp_path, layout):
    root = _write_sglang(tmp_path / "d", layout)
    nm = NameMap.from_toml(LAYOUT_MAP)
    with inkling_probe.open(root, name_map=nm) as d:
        assert isinstance(d, ForeignDump) and d.ranks == [0, 1] and d.world_size == 2
        keys = ["layers.3.resid", "layers.3.attn.out", "layers.3.mlp.out"]
        # the dump index orders the current layout; the legacy one has only file times (ties by name)
        assert d.keys() == keys if layout == "current" else sorted(d.keys()) == sorted(keys)
        for step in range(2):
            hidden, attn, mlp = _tensors(step)
            assert torch.equal(d.tensor("layers.3.resid", step).view(torch.int16), hidden.view(torch.int16))
            assert d.rows("layers.3.resid", step)[0]["dtype"] == "bfloat16"
            np.testing.assert_array_equal(d.array("layers.3.attn.out", step), attn.numpy())
            np.testing.assert_array_equal(d.array("layers.3.mlp.out", step), mlp.numpy())
            assert d.array("layers.3.attn.out", step, rank=1).shape == (5, 3)
        assert d.rows("layers.3.resid", 0)[0]["token_dim"] == 0


def test_sglang_folder_without_a_map_keeps_names_and_refuses_to_guess_a_layout(tmp_path):
    root = _write_sglang(tmp_path / "d", "current")
    with inkling_probe.open(root) as d:
        assert d.keys() == ["hidden.layer_id=3", "attn_out.layer_id=3", "mlp_partial.layer_id=3"]
        with pytest.raises(DumpError, match="no name map rule declares how its shards combine"):
            d.array("attn_out.layer_id=3")
        assert d.array("attn_out.layer_id=3", rank=1).shape == (5, 3)


def test_one_legacy_rank_folder_reads_alone(tmp_path):
    root = _write_sglang(tmp_path / "d", "legacy")
    one = os.path.join(root, "sglang_dump_1767225600.0_0")
    with inkling_probe.open(one) as d:
        assert d.ranks == [0] and d.world_size == 1
        hidden, _, _ = _tensors(1)
        np.testing.assert_array_equal(d.array("hidden.layer_id=3", 1), hidden.float().numpy())


def test_dumper_meta_and_dump_order(tmp_path):
    w = SGLangDumpWriter(tmp_path / "d")
    for name in ("b_second_alphabetically_first", "a_first_alphabetically_second"):
        w.dump(name, torch.ones(2))
    with inkling_probe.open(tmp_path / "d") as d:
        assert d.keys() == ["b_second_alphabetically_first", "a_first_alphabetically_second"]
        assert d.rows("a_first_alphabetically_second")[0]["meta"]["dumper"]["world_size"] == 1


def test_pt_folder_with_a_pattern_for_steps_ranks_and_keys(tmp_path):
    for step in range(2):
        for rank in range(2):
            os.makedirs(tmp_path / f"step{step}", exist_ok=True)
            torch.save(torch.full((4, 2), 10.0 * step + rank), tmp_path / f"step{step}/model.layers.0.mlp.rank{rank}.pt")
            torch.save({"a": torch.zeros(3), "b": [torch.ones(1), torch.ones(2)]},
                       tmp_path / f"step{step}/extra.rank{rank}.pt")
    nm = NameMap.from_toml("[[rule]]\nmatch = 'model\\.layers\\.(\\d+)\\.mlp'\nto = 'layers.\\1.mlp.out'\n"
                           "shard = 'concat'\ndim = 1\n[[rule]]\nmatch = 'extra\\..*'\nto = '\\g<0>'\nshard = 'replicated'")
    d = open_foreign(tmp_path, name_map=nm, pattern=r"step(?P<step>\d+)/(?P<key>.+)\.rank(?P<rank>\d+)\.pt")
    assert d.steps("layers.0.mlp.out") == [0, 1] and d.world_size == 2
    np.testing.assert_array_equal(d.array("layers.0.mlp.out", 1), np.repeat([[10.0, 10.0, 11.0, 11.0]], 4, 0))
    assert sorted(k for k in d.keys() if k.startswith("extra")) == ["extra.a", "extra.b.0", "extra.b.1"]


def test_safetensors_npz_npy_told_by_content_not_by_name(tmp_path):
    from safetensors.torch import save_file

    t = {"model.layers.0.mlp": torch.randn(3, 4).bfloat16(), "logits": torch.randn(3, 7)}
    save_file(t, tmp_path / "weights.dat")  # the name says nothing
    np.savez(tmp_path / "arrays.bin", x=np.arange(6, dtype=np.int32).reshape(2, 3), y=np.ones(2, np.float16))
    os.rename(tmp_path / "arrays.bin.npz", tmp_path / "arrays.blob")
    np.save(tmp_path / "one.npy", np.linspace(0, 1, 5))
    with inkling_probe.open(tmp_path / "weights.dat") as d:
        assert sorted(d.keys()) == ["logits", "model.layers.0.mlp"]
        got = d.tensor("model.layers.0.mlp")
        assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), t["model.layers.0.mlp"].view(torch.int16))
    with inkling_probe.open(tmp_path) as d:
        assert set(d.keys()) == {"weights.dat.logits", "weights.dat.model.layers.0.mlp", "arrays.blob.x", "arrays.blob.y", "one"}
        np.testing.assert_array_equal(d.array("arrays.blob.x"), np.arange(6).reshape(2, 3))
        assert d.rows("arrays.blob.y")[0]["dtype"] == "float16"
        np.testing.assert_array_equal(d.array("one"), np.linspace(0, 1, 5))


def test_fp8_in_safetensors_and_pt_round_trip(tmp_path):
    from safetensors.torch import save_file

    x = torch.randn(4, 4).to(torch.float8_e4m3fn)
    save_file({"x": x}, tmp_path / "a.safetensors")
    os.makedirs(tmp_path / "pt")
    torch.save(x, tmp_path / "pt" / "x.pt")
    for path, key in ((tmp_path / "a.safetensors", "x"), (tmp_path / "pt", "x")):
        with inkling_probe.open(path) as d:
            got = d.tensor(key)
            assert got.dtype == torch.float8_e4m3fn and torch.equal(got.view(torch.uint8), x.view(torch.uint8))


def test_our_own_dumps_still_open_as_ours(tmp_path):
    import dumps

    path = dumps.write(tmp_path / "ours", [[("a", torch.ones(2))]])
    d = inkling_probe.open(path)
    assert type(d).__name__ == "Dump"


def test_read_side_does_not_import_torch_for_safetensors_npz(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.ones(3))
    code = ("import sys, inkling_probe\n"
            f"d = inkling_probe.open({str(tmp_path)!r})\n"
            "assert d.array('a.x').sum() == 3\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_sglang_forward_hook_dump(tmp_path):
    """SGLang's tensor_dump_forward_hook: TP<t>_PP<p>_Rank<r>_pid<n>/Pass<NNNNN>.pt, {module: output}."""
    for rank in range(2):
        folder = tmp_path / f"TP{rank}_PP0_Rank{rank}_pid{4000 + rank}"
        folder.mkdir()
        for step in range(2):
            torch.save({"model.layers.0.self_attn.o_proj": torch.full((3, 4), 10.0 * step + rank),
                        "model.layers.0.mlp.gate": [torch.ones(3, 2), torch.zeros(3, 2)]},
                       folder / f"Pass{step:05d}.pt")
    nm = NameMap.from_toml("[[rule]]\nmatch = 'model\\.layers\\.(\\d+)\\.self_attn\\.o_proj'\n"
                           "to = 'layers.\\1.attn.o_proj'\nshard = 'partial'\n")
    d = open_foreign(tmp_path, name_map=nm)
    assert d.world_size == 2 and d.kind.startswith("sglang forward hooks")
    assert d.steps("layers.0.attn.o_proj") == [0, 1]
    np.testing.assert_array_equal(d.array("layers.0.attn.o_proj", 1), np.full((3, 4), 21.0))
    assert {"model.layers.0.mlp.gate.0", "model.layers.0.mlp.gate.1"} <= set(d.keys())


def test_foreign_options_on_our_own_dump_say_so(tmp_path):
    import dumps

    path = dumps.write(tmp_path / "ours", [[("a", torch.ones(2))]])
    with pytest.raises(DumpError, match="an inkling-probe dump; name_map="):
        inkling_probe.open(path, name_map="sglang_inkling")

"""``inkling-probe import``: a foreign dump written into our store compares exactly as the folder read
directly does, and its values, layouts and steps survive bit for bit."""
import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import dumps
import inkling_probe
from inkling_probe.cli import group
from inkling_probe.compare import compare
from inkling_probe.store.foreign import open_foreign
from inkling_probe.store.foreign.sglang_format import SGLangDumpWriter

MAP = """
[foreign]
token_dim = 0
[[rule]]
match = 'layer_(\\d+)_attn_out'
to = 'layers.\\1.attn.out'
shard = "concat"
dim = 1
[[rule]]
match = 'layer_(\\d+)_mlp_out'
to = 'layers.\\1.mlp.out'
shard = "partial"
[[rule]]
match = 'layer_(\\d+)_resid'
to = 'layers.\\1.resid'
shard = "replicated"
"""


def _layer(i, x):
    attn = torch.tanh(x @ torch.full((8, 6), 0.1 * (i + 1)))  # [T, 6]
    mlp = attn @ torch.full((6, 8), 0.05)  # [T, 8]
    return attn, mlp, x + mlp


def _run(fault_layer=None):
    """Per layer (attn.out, mlp.out, resid) of a toy 3-layer stack; the fault scales one MLP by 1.5."""
    x = torch.linspace(-1, 1, 40).reshape(5, 8)
    out = []
    for i in range(3):
        attn, mlp, x = _layer(i, x)
        if i == fault_layer:
            mlp = mlp * 1.5
            x = x - mlp / 1.5 + mlp
        out.append((attn, mlp, x))
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert")
    ref = dumps.write(root / "ref", [[(f"layers.{i}.{k}", t) for i, ts in enumerate(_run())
                                      for k, t in zip(("attn.out", "mlp.out", "resid"), ts)]])
    w = SGLangDumpWriter(root / "sglang", world_size=2)
    for i, (attn, mlp, resid) in enumerate(_run(fault_layer=1)):
        for rank in range(2):
            w.dump(f"layer_{i}_attn_out", attn[:, 3 * rank: 3 * rank + 3].clone(), rank=rank)
            w.dump(f"layer_{i}_mlp_out", mlp * (0.25 if rank == 0 else 0.75), rank=rank)
            w.dump(f"layer_{i}_resid", resid, rank=rank)
    (root / "sglang" / ".map.toml").write_text(MAP)  # a name map in the folder (outside it: refused)
    (root / "sglang" / "inkling_probe.toml").write_text('map = ".map.toml"\n')
    r = CliRunner().invoke(group, ["import", str(root / "sglang"), str(root / "imported")])
    assert r.exit_code == 0, r.output
    one = SGLangDumpWriter(root / "tp1")  # TP=1: tensors bit-identical to the reference's before the fault
    for i, (attn, mlp, resid) in enumerate(_run(fault_layer=1)):
        for name, t in (("attn_out", attn), ("mlp_out", mlp), ("resid", resid)):
            one.dump(f"layer_{i}_{name}", t)
    (root / "tp1" / ".map.toml").write_text(MAP)
    (root / "tp1" / "inkling_probe.toml").write_text('map = ".map.toml"\n')
    assert CliRunner().invoke(group, ["import", str(root / "tp1"), str(root / "tp1_imported")]).exit_code == 0
    return {"ref": ref, "folder": str(root / "sglang"), "imported": str(root / "imported"),
            "tp1": str(root / "tp1"), "tp1_imported": str(root / "tp1_imported")}


def _doc(report):
    doc = report.to_dict()
    for k in ("ref", "cand", "reference", "candidate"):
        doc.pop(k, None)
    return json.loads(json.dumps(doc, default=str).replace("sglang", "X").replace("imported", "X"))


def test_compare_on_the_imported_dump_equals_compare_on_the_folder(pair):
    direct = compare(pair["ref"], pair["folder"])
    imported = compare(pair["ref"], pair["imported"])
    assert direct.diverged and [c.key for c in direct.culprits] == ["layers.1.mlp.out"]
    assert _doc(direct) == _doc(imported)


def _verdict(report):
    doc = report.to_dict()
    return {"rows": [(r["key"], r["step"], r["call"], r["diverged"], r["error"]) for r in doc["rows"]],
            "first": doc["first_divergence"]["key"],
            "culprits": [(c["key"], [e["summary"] for e in c["explanations"]]) for c in doc["culprits"]]}


def test_bit_identical_rows_same_verdict_on_folder_and_store(pair):
    """The store's hashes mark bit-identical rows 'exact' without reading them; the folder, which has no
    hashes, measures them: error 0 both ways, the same verdict."""
    direct, imported = compare(pair["ref"], pair["tp1"]), compare(pair["ref"], pair["tp1_imported"])
    rows = {r.key: (r, s) for r, s in zip(direct.rows, imported.rows)}
    measured, by_hash = rows["layers.0.resid"]
    assert measured.status == by_hash.status == "exact"
    assert measured.metrics.ref_rms > 0 and by_hash.metrics.ref_rms == 0  # read on the folder; not on the store
    assert _verdict(direct) == _verdict(imported)
    assert _verdict(direct)["culprits"] == [("layers.1.mlp.out", ["candidate = 1.5 x reference (no known constant)"])]


def test_the_cli_says_the_same_on_both(pair):
    outs = []
    for cand in (pair["folder"], pair["imported"]):
        r = CliRunner().invoke(group, ["compare", pair["ref"], cand, "--json"])
        assert r.exit_code == 1, r.output
        doc = json.loads(r.stdout)
        outs.append(json.loads(json.dumps({k: v for k, v in doc.items() if k not in ("ref", "cand")})
                               .replace(pair["folder"], "X").replace(pair["imported"], "X")))
    assert outs[0] == outs[1]


def test_import_keeps_every_shard_its_layout_and_adds_statistics(pair):
    folder, imported = open_foreign(pair["folder"]), inkling_probe.open(pair["imported"])
    assert type(imported).__name__ == "Dump" and imported.world_size == 2
    assert folder.keys() == imported.keys()
    for key in folder.keys():
        a, b = folder.rows(key), imported.rows(key)
        assert [(r["rank"], r["shard"], r["dim"], r["shape"], r["dtype"], r["token_dim"]) for r in a] == \
               [(r["rank"], r["shard"], r["dim"], r["shape"], r["dtype"], r["token_dim"]) for r in b]
        np.testing.assert_array_equal(folder.array(key), imported.array(key))
        assert all(r["hash"] and r["nan"] == 0 for r in b)
    assert imported.segments[0].run["imported_from"].endswith("sglang")


def test_import_of_a_bf16_safetensors_file_is_bit_exact(tmp_path):
    from safetensors.torch import save_file

    t = torch.randn(33, 7).bfloat16()
    t[0, 0] = float("nan")
    save_file({"w": t}, tmp_path / "a.safetensors")
    r = CliRunner().invoke(group, ["import", str(tmp_path / "a.safetensors"), str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tensors"] == 1
    got = inkling_probe.open(tmp_path / "out").tensor("w")
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), t.view(torch.int16))


def test_bisect_oracle_reads_a_foreign_dump(pair):
    from inkling_probe.bisect.oracle import compare_dumps

    got = compare_dumps(pair["ref"], pair["folder"], None, {})
    assert {k: got[k] for k in ("passed", "first_divergence", "culprit", "culprit_step", "n_unchecked")} == {
        "passed": False, "first_divergence": "layers.1.mlp.out", "culprit": "layers.1.mlp.out", "culprit_step": 0,
        "n_unchecked": 0}
    assert compare_dumps(pair["folder"], pair["imported"], None, {})["passed"]


def test_import_keeps_steps_and_calls(tmp_path):
    w = SGLangDumpWriter(tmp_path / "d", world_size=2)
    for step in range(3):
        for rank in range(2):
            for call in range(2):
                w.dump("layer_0_attn_out", torch.full((2, 3), 10.0 * step + call + rank / 10), rank=rank, step=step)
    (tmp_path / "m.toml").write_text(MAP)
    r = CliRunner().invoke(group, ["import", str(tmp_path / "d"), str(tmp_path / "o"), "--map", str(tmp_path / "m.toml")])
    assert r.exit_code == 0, r.output
    folder = open_foreign(tmp_path / "d", name_map=str(tmp_path / "m.toml"))
    store = inkling_probe.open(tmp_path / "o")
    assert store.steps("layers.0.attn.out") == [0, 1, 2]
    for step in range(3):
        for call in range(2):
            got = store.array("layers.0.attn.out", step, call=call)
            np.testing.assert_array_equal(got, folder.array("layers.0.attn.out", step, call=call))
            assert got[0, 0] == np.float32(10.0 * step + call) and got[0, 3] == np.float32(10.0 * step + call + 0.1)
    assert len([n for n in os.listdir(tmp_path / "o") if n.endswith(".h5")]) == 6  # a segment per rank per step


def test_report_from_a_foreign_dump(pair, tmp_path):
    r = CliRunner().invoke(group, ["report", pair["ref"], pair["folder"], "-o", str(tmp_path / "rep")])
    assert r.exit_code in (0, 1), r.output
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert "layers.1.mlp.out" in json.dumps(summary)
    assert (tmp_path / "rep" / "slice.h5").exists()

"""compare on hostile or odd inputs (issue 23): a zero reference the candidate is not, and an index whose
hashes claim agreement the data do not show."""
import glob
import json

import h5py
import numpy as np
import torch
from click.testing import CliRunner

from inkling_probe.cli import group
from inkling_probe.compare import compare

from dumps import write

G = torch.Generator().manual_seed(3)


def _zero_case(tmp_path):
    x = torch.randn(8, 32, generator=G)
    zero, written = torch.zeros(8, 32), torch.zeros(8, 32)
    written[3, 4] = 1.0  # "this should be zero and is not"
    ref = write(tmp_path / "r", [[("embed", x), ("layers.0.mask", zero), ("layers.0.resid", x)]])
    cand = write(tmp_path / "c", [[("embed", x), ("layers.0.mask", written), ("layers.0.resid", x)]])
    return ref, cand


def test_a_zero_reference_the_candidate_is_not_gets_an_answer(tmp_path):
    ref, cand = _zero_case(tmp_path)
    rep = compare(ref, cand)
    assert rep.culprit.key == "layers.0.mask"
    kinds = {f["kind"]: f for f in rep.culprit.findings}
    assert kinds["nonzero"]["evidence"]["nonzero"] == 1
    assert [f["evidence"]["indices"] for f in rep.culprit.findings if f["kind"] == "confined"][0] == [3]


def test_compare_and_report_say_it_in_one_answer_not_a_traceback(tmp_path):
    ref, cand = _zero_case(tmp_path)
    r = CliRunner().invoke(group, ["compare", ref, cand, "--json"])
    assert r.exit_code == 1, r.output
    assert json.loads(r.output)["culprit"]["key"] == "layers.0.mask"
    r = CliRunner().invoke(group, ["report", ref, cand, "-o", str(tmp_path / "rep")])
    assert r.exit_code in (0, 1) and not isinstance(r.exception, ZeroDivisionError), r.output
    assert "all zeros" in (tmp_path / "rep" / "report.md").read_text()


def _forge_hashes(dump_dir, hashes: dict) -> None:
    """Overwrite the index hashes of ``dump_dir`` with ``hashes`` (key -> hash), as a hostile dump would."""
    for seg in glob.glob(f"{dump_dir}/*.h5"):
        with h5py.File(seg, "r+") as f:
            idx = f["index"][...]
            for i, row in enumerate(idx):
                key = row["key"].decode() if isinstance(row["key"], bytes) else row["key"]
                if key in hashes:
                    idx[i]["hash"] = hashes[key]
            f["index"][...] = idx


def _hashes(dump_dir) -> dict:
    out = {}
    for seg in glob.glob(f"{dump_dir}/*.h5"):
        with h5py.File(seg, "r") as f:
            for row in f["index"][...]:
                key = row["key"].decode() if isinstance(row["key"], bytes) else row["key"]
                out[key] = row["hash"]
    return out


def test_hashes_that_claim_agreement_are_checked_against_the_data(tmp_path):
    x, h = torch.randn(16, 64, generator=G), torch.randn(16, 64, generator=G)
    ref = write(tmp_path / "r", [[("embed", x), ("layers.0.out", h)]])
    cand = write(tmp_path / "c", [[("embed", x), ("layers.0.out", h * 448)]])
    _forge_hashes(cand, _hashes(ref))
    assert _hashes(cand) == _hashes(ref)  # the index now claims bit-identical tensors
    rep = compare(ref, cand)
    row = rep.row("layers.0.out")
    assert row.diverged and rep.culprit.key == "layers.0.out" and "index does not describe its data" in row.note
    assert rep.row("embed").status == "exact"  # true agreement still reads exact (checked, not trusted)
    r = CliRunner().invoke(group, ["compare", ref, cand])
    assert r.exit_code == 1


def test_hash_only_dumps_say_they_trusted_the_hashes(tmp_path):
    x = torch.randn(4, 8, generator=G)
    a = write(tmp_path / "a", [[("layers.0.h", x)]], mode="hash")
    b = write(tmp_path / "b", [[("layers.0.h", x.clone())]], mode="hash")
    row = compare(a, b).row("layers.0.h")
    assert row.status == "exact" and "hashes alone" in row.note
    assert np.isfinite(row.score)


def test_a_zero_reference_against_a_nan_is_explained_without_error():
    from inkling_probe.compare import explain

    r, c = np.zeros((4, 8)), np.zeros((4, 8))
    c[1, 2] = np.nan
    found = explain(r, c, noise=1e-3)
    assert [f.kind for f in found][0] == "nonfinite" and "nonzero" not in {f.kind for f in found}
    c[1, 2], c[2, 0] = 0.0, -3.0
    assert "nonzero" in {f.kind for f in explain(r, c, noise=1e-3)}

"""The report folder from a real hunt (raw_input_amax): every file, the culprit in each view, the
slice a valid dump holding the culprit's tensors bit-exact, and the CLI on good and bad input."""
import json
import os

import numpy as np
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group

FILES = {"report.html", "report.md", "summary.json", "divergence_by_layer.png", "heatmap.png",
         "environment.json", "slice.h5", "repro.sh", "repro.json"}
CULPRIT = "layers.3.mlp.experts"


def test_report_folder_holds_every_artifact_with_the_culprit(amax_report):
    out, written = amax_report
    assert set(os.listdir(out)) == FILES and os.path.isfile(str(out) + ".zip")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["culprits"][0]["key"] == CULPRIT and summary["first_divergence"]["key"] == CULPRIT
    assert summary["ref"] == "ref-hf-bf16"  # dumps named by folder, no absolute path
    assert any(f["summary"].startswith("candidate = 2688 x reference") for e in summary["explanations"]
               for f in e["findings"])
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2 and CULPRIT in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "2688 = 6*448" in (out / "report.md").read_text()
    for png in ("divergence_by_layer.png", "heatmap.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert written.files["slice.h5"] < 1 << 20  # small enough to attach


def test_slice_is_a_dump_with_the_culprit_inputs_and_outputs_bit_exact(hunt, amax_report):
    with inkling_probe.open(str(amax_report[0] / "slice.h5")) as s, inkling_probe.open(hunt["amax"]) as cand, \
            inkling_probe.open(hunt["ref_bf16"]) as ref:
        keys = set(s.keys())
        assert {f"cand/{CULPRIT}", f"ref/{CULPRIT}", f"control/{CULPRIT}", f"ref/{CULPRIT}.in.0",
                f"cand/{CULPRIT}.input_scale"} <= keys
        np.testing.assert_array_equal(s.array(f"cand/{CULPRIT}"), cand.array(CULPRIT))
        np.testing.assert_array_equal(s.array(f"ref/{CULPRIT}.in.0"), ref.array(f"{CULPRIT}.in.0"))
        assert s.rows(f"cand/{CULPRIT}")[0]["dtype"] == "bfloat16"
        # bf16 is stored as itself in the slice too: the same bytes, the same hash as the source
        assert s.rows(f"cand/{CULPRIT}")[0]["hash"] == cand.rows(CULPRIT)[0]["hash"]
        assert s.rows(f"cand/{CULPRIT}")[0]["storage"] == "native"


def test_report_cli_from_dumps_and_from_saved_json(hunt, amax_doc, tmp_path):
    runner = CliRunner()
    res = runner.invoke(group, ["report", hunt["ref_fp32"], hunt["gate_up"], "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "culprit layers.2.mlp.experts" in res.output and "a.zip" in res.output
    saved = tmp_path / "amax.json"
    saved.write_text(json.dumps(amax_doc))
    res = runner.invoke(group, ["report", str(saved), "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert set(os.listdir(tmp_path / "b")) == FILES  # the saved JSON names the dumps: they are read too


def test_report_cli_bad_input_is_one_line_exit_2(hunt, tmp_path):
    runner = CliRunner()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "not.json").write_text("{")
    (tmp_path / "other.json").write_text('{"a": 1}')
    cases = [[str(tmp_path / "missing.json")], [str(tmp_path / "not.json")], [str(tmp_path / "other.json")],
             [hunt["ref_fp32"]], [hunt["ref_fp32"], str(tmp_path / "nodump")], [hunt["ref_fp32"], hunt["gate_up"], hunt["amax"]]]
    for args in cases:
        res = runner.invoke(group, ["report", *args, "-o", str(tmp_path / "o")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, (args, res.output)
    res = runner.invoke(group, ["report", hunt["ref_fp32"], hunt["gate_up"], "-o", str(tmp_path / "full")])
    assert res.exit_code == 2 and "not an empty folder" in res.output
    assert not (tmp_path / "o").exists()


def test_report_from_a_bisect_layers_work_directory(hunt, tmp_path):
    import shutil

    wd = tmp_path / "bl"  # the layout `bisect layers` leaves: state.json and the runs' folders
    wd.mkdir()
    (wd / "state.json").write_text(json.dumps({"kind": "layers", "answer": {"layer": "layers.3", "diverged": True}}))
    for n, side, src in ((7, "ref", hunt["ref_bf16"]), (8, "cand", hunt["amax"])):
        shutil.copytree(src, wd / "bad" / f"00{n}-{side}-layers.3" / "dump")
    res = CliRunner().invoke(group, ["report", str(wd), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "culprit layers.3.mlp.experts" in res.output
    (wd / "state.json").write_text(json.dumps({"kind": "flags", "answer": {}}))
    res = CliRunner().invoke(group, ["report", str(wd), "-o", str(tmp_path / "out2")])
    assert res.exit_code == 2 and "bisect 'flags'" in res.output


def test_the_page_counts_compared_keys_one_way(amax_report):
    """The page's inputs line and its folded table give one count (issue 22: "111 keys compared" over a
    fold of "all 123 compared keys", which also held the rows against the control)."""
    import re

    out = amax_report[0]
    summary = json.loads((out / "summary.json").read_text())
    n, m = len(summary["rows"]), len(summary.get("control_rows") or [])
    assert m > 0  # the hunt has a control: both counts are said
    said = f"{n} keys compared against the reference, {m} against the control"
    page = (out / "report.html").read_text()
    assert page.count(said) == 2 and f"<summary>all {said}</summary>" in page
    assert not re.search(r"all \d+ compared keys", page)
    folded = page.split(f"<summary>all {said}</summary>")[1].split("</details>")[0]
    assert folded.count("<tr") - 1 == n + m  # the fold holds exactly what the count says (one header row)
    assert said in (out / "report.md").read_text()

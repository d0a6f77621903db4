"""Views of a compare document: culprits first everywhere, the ranked ``culprits`` list read when
present (``culprit`` otherwise), plots that mark the culprit, per-token errors that find the
planted token, and a read side that imports neither torch nor matplotlib."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from dumps import write

from inkling_probe.views import ReportViews, as_doc, culprits
from inkling_probe.views.html import repr_html, table
from inkling_probe.views.text import short_repr, summary_lines


def _row(key, layer, error, threshold=0.01, step=0, diverged=None, jump=1.0):
    diverged = error > threshold if diverged is None else diverged
    return {"key": key, "step": step, "call": 0, "ref_key": key, "cand_key": key, "layer": layer, "error": error,
            "threshold": threshold, "floor": None, "score": error / threshold, "jump": jump, "status":
            "diverged" if diverged else "ok", "diverged": diverged, "shape": [6, 4], "ref_dtype": "float32",
            "cand_dtype": "float32", "against": "reference", "note": "", "metrics": {"rel_rms": error}}


def _doc(ranked=True):
    rows = [_row("embed", None, 0.0), _row("layers.0.out", 0, 0.001), _row("layers.1.attn", 1, 0.5, jump=50),
            _row("layers.1.out", 1, 0.4), _row("layers.2.mlp", 2, 0.9, jump=2.2), _row("layers.2.out", 2, 0.8)]
    brief = lambda r: {k: r[k] for k in ("key", "step", "call", "error", "threshold", "score", "jump")}
    doc = {"ref": "/somewhere/ref", "cand": "/somewhere/cand", "control": None, "metric": "rel_rms",
           "diverged": True, "first_divergence": brief(rows[2]), "culprit": brief(rows[2]), "rows": rows,
           "explanations": [{"key": "layers.1.attn", "step": 0, "against": "reference",
                             "findings": [{"hypothesis": "constant_ratio", "summary": "candidate = 2 x reference"}]}],
           "notes": []}
    if ranked:
        doc["culprits"] = [brief(rows[2]), {**brief(rows[4]), "explanations": [
            {"hypothesis": "zeroed", "summary": "rows 3, 4 are zero"}]}]
    return doc


class Report(ReportViews):
    def __init__(self, doc):
        self.doc = doc

    def to_dict(self):
        return self.doc


def test_ranked_culprits_are_read_when_present_else_the_single_culprit():
    assert [c["key"] for c in culprits(_doc())] == ["layers.1.attn", "layers.2.mlp"]
    assert [c["key"] for c in culprits(_doc(ranked=False))] == ["layers.1.attn"]
    lines = summary_lines(_doc())
    assert "culprit 2: layers.2.mlp" in "\n".join(lines) and "zeroed" in "\n".join(lines)
    assert "candidate = 2 x reference" in "\n".join(lines)


def test_short_repr_and_html_put_culprits_first():
    rep = Report(_doc())
    text = repr(rep)
    assert text.startswith("<Report cand vs ref: 6 keys, 4 diverged; culprit layers.1.attn") and len(text) < 200
    html = rep._repr_html_()
    body = html[html.index("<tbody>"):]
    order = [k for k in ("layers.1.attn", "layers.2.mlp", "layers.1.out") if k in body]
    assert sorted(order, key=body.index) == ["layers.1.attn", "layers.2.mlp", "layers.1.out"]
    assert "CULPRIT 1,FIRST" in html and "CULPRIT 2" in html
    assert "layers.0.out" not in table(_doc()) and "layers.0.out" in table(_doc(), diverged_only=False)
    assert "<script" not in repr_html(_doc()) and "/somewhere" not in html


def test_plot_stars_each_culprit_on_a_log_axis():
    pytest.importorskip("matplotlib")
    ax = Report(_doc()).plot(ax=_axes())
    assert ax.get_yscale() == "log"
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["culprit 1: layers.1.attn", "culprit 2: layers.2.mlp"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["L0", "L1", "L2"]


def _axes():
    from matplotlib.figure import Figure

    return Figure().add_subplot()


def test_to_pandas_or_a_clear_message():
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            Report(_doc()).to_pandas()
        return
    frame = Report(_doc()).to_pandas()
    assert list(frame["key"])[:3] == ["embed", "layers.0.out", "layers.1.attn"] and "m_rel_rms" in frame


def test_token_errors_find_the_planted_token(tmp_path):
    from inkling_probe.compare import compare
    from inkling_probe.views.tokens import token_errors

    g = torch.Generator().manual_seed(0)
    ref_steps = [[(f"layers.{i}.out", torch.randn(6, 8, generator=g)) for i in range(3)]]
    cand_steps = [[(k, t.clone()) for k, t in ref_steps[0]]]
    for _, t in cand_steps[0][1:]:
        t[4] *= 1.5  # token 4 from layer 1 on
    ref, cand = write(tmp_path / "ref", ref_steps), write(tmp_path / "cand", cand_steps)
    report = compare(ref, cand)
    import inkling_probe

    te = token_errors(report.to_dict(), inkling_probe.open(ref), inkling_probe.open(cand))
    assert te.labels == ["L0 out", "L1 out", "L2 out"] and te.errors.shape == (3, 6)
    assert np.all(te.errors[0] == 0) and np.allclose(te.errors[1:, 4], 0.5)
    assert np.all(np.delete(te.errors[1:], 4, axis=1) == 0)


def test_read_side_imports_neither_torch_nor_matplotlib():
    code = ("import sys, inkling_probe.views, inkling_probe.bundle, inkling_probe.views.tokens; "
            "print(json.dumps([m for m in ('torch', 'matplotlib') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_as_doc_takes_a_report_a_dict_or_a_saved_json(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(_doc()))
    assert as_doc(str(tmp_path / "r.json"))["rows"] == as_doc(Report(_doc()))["rows"] == _doc()["rows"]


def test_inkling_probe_compare_is_callable_and_its_report_has_the_views(tmp_path):
    g = torch.Generator().manual_seed(1)
    steps = [[(f"layers.{i}.out", torch.randn(4, 8, generator=g)) for i in range(2)]]
    bad = [[(k, t * (3.0 if k == "layers.1.out" else 1.0)) for k, t in steps[0]]]
    ref, cand = write(tmp_path / "ref", steps), write(tmp_path / "cand", bad)
    code = f"""if True:  # a fresh interpreter, as in a notebook
        import inkling_probe
        rep = inkling_probe.compare_dumps({ref!r}, {cand!r})
        print(repr(rep))
        assert "CULPRIT 1" in rep._repr_html_() and "culprit 1: layers.1.out" in rep.summary()
        import inkling_probe.compare.engine
        assert callable(inkling_probe.compare)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.startswith("<Report cand vs ref: 2 keys, 1 diverged; culprit layers.1.out")

"""inkling_model's image processor against transformers' InklingImageProcessor, image by image:
patch grid and pixel values bit-exact (numpy RGBA arrays: within one 8-bit level, see
model/multimodal/processor_parity.py). transformers' processor needs torchvision: without it every
case skips with that reason. Run standalone: ``python3 -m pytest -q tests/model/test_multimodal_image_parity.py``;
``scripts/image_parity.py OUT.txt`` writes the per-image lines."""
import pytest

from inkling_model.multimodal import processor_parity as pp

REASON = pp.missing()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("case", pp.cases(), ids=lambda c: c.name.replace(" ", "-"))
def test_image_processor_matches_transformers(case):
    r = pp.run_case(case)
    if r["refused"]:  # transformers (or ours) does not take this input at all: nothing to compare
        pytest.skip(pp.line(r))
    assert r["ok"], pp.line(r)


def test_cases_cover_modes_sizes_and_patches():
    """The case list itself (runs everywhere): every mode, both inputs, each preset's patch, odd sizes."""
    cs = pp.cases()
    assert {c.mode for c in cs} == set(pp.MODES) and {c.source for c in cs} == {"pil", "numpy"}
    assert {c.patch for c in cs} == {2, 4, 40}
    assert any(c.height % c.patch and c.width % c.patch for c in cs) and any(c.height < c.patch for c in cs)
    x = pp.pixels(pp.Case(5, 6, "RGBA", 2, "pil"))
    assert x.shape == (5, 6, 4) and x.min() == 0 and x.max() == 255
    assert pp.pixels(pp.Case(5, 6, "L", 2, "numpy")).shape == (5, 6, 1)  # transformers 5.24 refuses [H, W]
    assert pp.pixels(pp.Case(5, 6, "L", 2, "pil")).shape == (5, 6)  # PIL mode L


def test_a_refusal_is_a_line_not_a_traceback(monkeypatch):
    def refuse(case):
        raise ValueError("Could not make a flat list of images from [array(...)]\nmore")

    monkeypatch.setattr(pp, "theirs", refuse)
    r = pp.run_case(pp.Case(5, 6, "L", 2, "numpy"))
    assert r["refused"] == "refused by transformers: ValueError: Could not make a flat list of images from [array(...)]"
    assert pp.line(r).startswith("skip  5x6 L P=2 numpy: refused by transformers")


def test_ours_refusing_what_transformers_takes_fails(monkeypatch):
    """Only transformers' refusal is a skip: ours raising on an image transformers processed is a
    failure, never a silent skip (else a broken processor would pass every case)."""
    import numpy as np

    def refuse(case):
        raise ValueError("an image must be uint8\nmore")

    monkeypatch.setattr(pp, "theirs", lambda case: (np.zeros((30, 2, 2, 2, 3), np.float32), [30]))
    monkeypatch.setattr(pp, "ours", refuse)
    r = pp.run_case(pp.Case(5, 6, "L", 2, "numpy"))
    assert r["ok"] is False and not r["refused"]
    assert pp.line(r).startswith("FAIL  5x6 L P=2 numpy: refused by inkling_model: ValueError: an image must be uint8")


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_a_plain_rgb_image_is_compared():
    """A PIL RGB image must be taken by transformers: if every case were refused (an API change), the
    parametrized test would skip all and pass on nothing."""
    r = pp.run_case(pp.Case(16, 16, "RGB", 4, "pil"))
    assert not r["refused"] and r["ok"], pp.line(r)


def test_the_script_gives_no_all_clear_on_nothing_compared(tmp_path, monkeypatch, capsys):
    """scripts/image_parity.py: every image refused by transformers is exit 2 (not run), not exit 0
    over "0 of 0 images"; one of ours failing is exit 1."""
    import importlib.util
    import sys
    import types
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("image_parity", Path(__file__).parents[2] / "scripts" / "image_parity.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    import importlib.machinery

    import transformers  # noqa: F401 - imported before the stub below, so it looks torchvision up for real

    stub = types.ModuleType("torchvision")
    stub.__version__, stub.__spec__ = "stub", importlib.machinery.ModuleSpec("torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision", stub)
    monkeypatch.setattr(pp, "missing", lambda: None)
    monkeypatch.setattr(pp, "cases", lambda: [pp.Case(5, 6, "RGB", 2, "pil")])
    out = str(tmp_path / "parity.txt")
    monkeypatch.setattr(sys, "argv", ["image_parity.py", out])
    monkeypatch.setattr(pp, "run_case", lambda c: {"case": c.name, "refused": "refused by transformers: X", "ok": None,
                                                   "max_abs": None})
    assert script.main() == 2 and "refused every image" in capsys.readouterr().err
    monkeypatch.setattr(pp, "run_case", lambda c: {"case": c.name, "refused": None, "error": "refused by inkling_model: Y",
                                                   "ok": False, "max_abs": None})
    assert script.main() == 1
    monkeypatch.setattr(sys, "argv", ["image_parity.py", str(tmp_path / "no" / "such" / "dir.txt")])
    capsys.readouterr()
    assert script.main() == 2 and "cannot write" in capsys.readouterr().err  # one line, not a traceback

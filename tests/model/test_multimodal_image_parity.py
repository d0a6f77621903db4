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
    assert r["ok"], pp.line(r)


def test_cases_cover_modes_sizes_and_patches():
    """The case list itself (runs everywhere): every mode, both inputs, each preset's patch, odd sizes."""
    cs = pp.cases()
    assert {c.mode for c in cs} == set(pp.MODES) and {c.source for c in cs} == {"pil", "numpy"}
    assert {c.patch for c in cs} == {2, 4, 40}
    assert any(c.height % c.patch and c.width % c.patch for c in cs) and any(c.height < c.patch for c in cs)
    x = pp.pixels(pp.Case(5, 6, "RGBA", 2, "pil"))
    assert x.shape == (5, 6, 4) and x.min() == 0 and x.max() == 255

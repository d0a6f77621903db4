"""The multimodal hunt: each planted multimodal fault is named top-1 at its true location (fp32,
and bf16 with a control), the re-norm is explained from its own evidence and named by modality,
benign pairs are within tolerance, and a placeholder-id mismatch is one clear error."""

import pytest
import torch

import inkling_probe
from inkling_model.config import InklingConfig
from inkling_model.multimodal.checkpoint import write_multimodal_checkpoint
from inkling_model.multimodal.config import MultimodalConfig
from inkling_model.multimodal.hf_reference import hf_inputs, load_hf_mm_model, step
from inkling_model.multimodal.processor import MediaError, expand_placeholders
from inkling_model.switches import faults
from inkling_probe.compare import compare, modality

from mm_util import build, prompt, run_mm_rank

MM_FAULTS = ("renorm_fused_rows", "vision_fold_order", "audio_codebook_offsets")


@pytest.fixture(scope="module")
def hunt(tmp_path_factory):
    d = tmp_path_factory.mktemp("mmhunt")
    cfg = InklingConfig.preset("tiny")
    mm = MultimodalConfig.preset("tiny", cfg)
    ckpt = str(write_multimodal_checkpoint(cfg, mm, d / "ckpt", seed=0))
    ids, media = prompt(mm, "image+audio")
    dumps = {}
    for dtype in ("fp32", "bf16"):
        hf = load_hf_mm_model(ckpt, dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
        with torch.no_grad(), inkling_probe.record(hf, d / f"hf-{dtype}", name_map="hf_inkling"):
            step(mm, ids, media)
            hf(**hf_inputs(ids, media))
        dumps[f"hf-{dtype}"] = str(d / f"hf-{dtype}")
        run_mm_rank(0, 1, ckpt, ids.tolist(), media, str(d / f"ours-{dtype}"), dtype)
        dumps[f"ours-{dtype}"] = str(d / f"ours-{dtype}")
    return dict(cfg=cfg, mm=mm, ckpt=ckpt, ids=ids, media=media, dir=d, dumps=dumps)


def _faulty(hunt, name, dtype):
    out = str(hunt["dir"] / f"{name}-{dtype}")
    if (hunt["dir"] / f"{name}-{dtype}").exists():
        return out
    with faults.activate(name):
        run_mm_rank(0, 1, hunt["ckpt"], hunt["ids"].tolist(), hunt["media"], out, dtype)
    return out


@pytest.mark.parametrize("name", MM_FAULTS)
def test_fault_top1_fp32(hunt, name):
    rep = compare(hunt["dumps"]["hf-fp32"], _faulty(hunt, name, "fp32"))
    assert rep.culprit is not None and rep.culprit.key == faults.location(name, hunt["cfg"]), rep.culprit


@pytest.mark.parametrize("name", MM_FAULTS)
def test_fault_top1_bf16_with_control(hunt, name):
    rep = compare(hunt["dumps"]["hf-fp32"], _faulty(hunt, name, "bf16"), control=hunt["dumps"]["ours-bf16"])
    assert rep.culprit is not None and rep.culprit.key == faults.location(name, hunt["cfg"]), rep.culprit


def test_renorm_explained_and_named_by_modality(hunt):
    ref, cand = inkling_probe.open(hunt["dumps"]["hf-fp32"]), inkling_probe.open(_faulty(hunt, "renorm_fused_rows", "fp32"))
    rep = compare(ref, cand)
    found = [f for f in rep.findings("fused") if f.name == "renormalised_rows"]
    spans, n = modality.layout(cand)
    image_rows = modality.kind_rows("image", spans, n)
    assert found and found[0].evidence["rows"] == image_rows
    lines = modality.lines(rep, ref, cand)
    first, count = image_rows[0], len(image_rows)
    assert f"split: vision tower clean, audio tower clean, born at the fusion (fused)" in lines
    assert any(f"image 0's rows [{first}..{first + count - 1}]" in ln and "re-normalised: each row scaled to unit rms" in ln
               for ln in lines), lines


def test_clean_split_names_decoder(hunt):
    """A decoder fault: towers and fused stream clean, born in the decoder (the bring-up's split)."""
    out = str(hunt["dir"] / "amax")
    with faults.activate("gate_up_layout"):
        run_mm_rank(0, 1, hunt["ckpt"], hunt["ids"].tolist(), hunt["media"], out, "fp32")
    rep = compare(hunt["dumps"]["hf-fp32"], out)
    loc = faults.location("gate_up_layout", hunt["cfg"])
    assert modality.split_line(rep, modality.layout(inkling_probe.open(out))[0]) == \
        f"vision tower clean, audio tower clean, fused stream clean, born in the decoder at {loc}"


def test_benign_bf16_vs_fp32_with_control(hunt):
    rep = compare(hunt["dumps"]["hf-fp32"], hunt["dumps"]["ours-bf16"], control=hunt["dumps"]["hf-bf16"])
    assert not rep.diverged, rep.culprit


@pytest.mark.parametrize("kind", ["text", "image", "audio"])
def test_rows_judges_one_modality(hunt, kind):
    ref, cand = inkling_probe.open(hunt["dumps"]["hf-fp32"]), inkling_probe.open(_faulty(hunt, "renorm_fused_rows", "fp32"))
    rep = compare(modality.view(ref, kind, cand), modality.view(cand, kind, ref), jobs=1)
    if kind == "image":  # the image rows are where it is born
        assert rep.culprit is not None and rep.culprit.key == "fused"
    else:  # text and audio rows are clean at the fusion, dirtied later by the decoder's token mixing of the
        fused = next(r for r in rep.rows if r.key == "fused")  # image rows: carried across, not born (boundary.py)
        assert fused.status in ("ok", "exact") and rep.diverged and rep.culprits == []
        assert any(n.startswith(f"{kind} rows carry error") and "image 0's rows [3..14]" in n and "off from fused" in n
                   for n in rep.notes), rep.notes
    spans, n = modality.layout(cand)
    for line in modality.lines(rep, ref, cand, kind):  # rows named in the stream's numbering, of this modality
        if line.startswith("  rows of ") and kind != "text":
            assert f"{kind} 0's rows" in line and "text rows" not in line, line
    keys = {r.key for r in rep.rows}
    assert ("vision.out" in keys) == (kind == "image") and ("audio.out" in keys) == (kind == "audio")


@pytest.mark.parametrize("name", ["vision_fold_order", "audio_codebook_offsets"])
def test_rows_text_names_no_culprit_for_a_media_fault(hunt, name):
    """Before: --rows text blamed layers.0.attn.out / layers.0.attn.v (the first mixing key the text rows
    after the media read them through), and scores_bias rows of later layers as own_relation culprits."""
    ref, cand = inkling_probe.open(hunt["dumps"]["hf-fp32"]), inkling_probe.open(_faulty(hunt, name, "fp32"))
    rep = compare(modality.view(ref, "text", cand), modality.view(cand, "text", ref), jobs=1, explain=False)
    kind = "image" if name.startswith("vision") else "audio"
    assert rep.diverged and rep.culprits == []
    assert any(n.startswith("text rows carry error") and f"{kind} 0's rows" in n for n in rep.notes), rep.notes


def test_rows_text_names_a_text_fault_at_the_short_conv(hunt, tmp_path):
    """The text rows x1.2 at layers.0.mlp_sconv (its media rows clean): still born there."""
    model = build(hunt["ckpt"], "fp32")
    conv = next(m for n, m in model.named_modules() if n.endswith("layers.0.mlp_sconv"))
    spans, n = modality.layout(inkling_probe.open(hunt["dumps"]["ours-fp32"]))
    text = modality.kind_rows("text", spans, n)

    def scale(mod, args, out):
        out = out.clone()
        out[..., text, :] *= 1.2
        return out
    conv.register_forward_hook(scale)
    with torch.no_grad(), inkling_probe.recording(str(tmp_path / "sconv")):
        model(hunt["ids"], media=hunt["media"])
    ref, cand = inkling_probe.open(hunt["dumps"]["hf-fp32"]), inkling_probe.open(str(tmp_path / "sconv"))
    rep = compare(modality.view(ref, "text", cand), modality.view(cand, "text", ref), jobs=1, explain=False)
    assert rep.culprit is not None and rep.culprit.key == "layers.0.mlp_sconv"
    assert not any(n.startswith("text rows carry error") for n in rep.notes)


def test_image_at_another_position_aligns_by_modality_rows(hunt):
    mm = hunt["mm"]
    ids2, media = prompt(mm, "image", text=(1, 5, 6, 7, 8, 9, 10))
    toks = [1, 5, 6, 7, 8, mm.image_token_id, 9, 10]
    moved = torch.tensor(expand_placeholders(toks, mm, media))
    a, b = str(hunt["dir"] / "pos-a"), str(hunt["dir"] / "pos-b")
    run_mm_rank(0, 1, hunt["ckpt"], ids2.tolist(), media, a)
    run_mm_rank(0, 1, hunt["ckpt"], moved.tolist(), media, b)
    ra, rb = inkling_probe.open(a), inkling_probe.open(b)
    assert modality.layout(ra)[0] != modality.layout(rb)[0]
    rep = compare(modality.view(ra, "image"), modality.view(rb, "image"), include=["vision.*", "fused", "embed"], jobs=1)
    assert not rep.diverged and {r.key for r in rep.rows} >= {"vision.out", "fused"}


def test_reference_dump_records_the_layout_too(hunt):
    """Every dump records which rows are text, image or audio: transformers' too (step meta)."""
    ref, ours = inkling_probe.open(hunt["dumps"]["hf-fp32"]), inkling_probe.open(hunt["dumps"]["ours-fp32"])
    assert modality.layout(ref) is not None and modality.layout(ref)[0] == modality.layout(ours)[0]


def test_placeholder_id_mismatch_is_one_clear_error(hunt):
    model = build(hunt["ckpt"], "fp32")
    ids = hunt["ids"].clone()
    ids[ids == hunt["mm"].image_token_id] = hunt["mm"].image_token_id - 10  # the prompt used another id
    with pytest.raises(MediaError, match=r"image placeholders \(token id \d+\): 0 in the prompt for \d+ image feature rows"):
        model(ids, media=hunt["media"])


def test_fault_needs_its_modality_location_is_registered(hunt):
    for name in MM_FAULTS:
        assert faults.location(name, hunt["cfg"]) in ("fused", "vision.layers.0", "audio.embed")


TOWER_EXPLAINED = {"vision_fold_order": "reordered_input", "audio_codebook_offsets": "positionless_lookup"}


@pytest.mark.parametrize("name", sorted(TOWER_EXPLAINED))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_tower_faults_explained_from_the_recorded_inputs(hunt, name, dtype):
    """The fold order and the dropped codebook offsets are explained at their culprit from its
    recorded input (transformers' dump) and the rows that stayed exact / came out alike."""
    control = hunt["dumps"]["ours-bf16"] if dtype == "bf16" else None
    rep = compare(hunt["dumps"]["hf-fp32"], _faulty(hunt, name, dtype), control=control)
    loc = faults.location(name, hunt["cfg"])
    found = {f.name: f for f in rep.findings(loc)}
    assert TOWER_EXPLAINED[name] in found, [f.summary for f in found.values()]
    if name == "vision_fold_order":  # the patch's spatial dims of pixel_values [N, T, P, P, C]
        assert found["reordered_input"].evidence["dims"] == [2, 3]
        assert found["reordered_input"].evidence["weak"]  # only the padded blocks stayed exact: said so
    lines = modality.lines(rep, inkling_probe.open(hunt["dumps"]["hf-fp32"]), inkling_probe.open(_faulty(hunt, name, dtype)))
    assert any(ln.startswith(f"  explain {loc}: ") for ln in lines), lines


def test_input_hypotheses_do_not_fire_elsewhere(hunt):
    """Neither input hypothesis is claimed for the re-norm, a decoder fault or the other tower's fault."""
    for name in ("renorm_fused_rows", "gate_up_layout", *TOWER_EXPLAINED):
        out = _faulty(hunt, name, "fp32")
        rep = compare(hunt["dumps"]["hf-fp32"], out)
        names = {f.name for c in rep.culprits for f in rep.findings(c.key, c.step)}
        expected = {TOWER_EXPLAINED.get(name)} - {None}
        assert names & set(TOWER_EXPLAINED.values()) <= expected, (name, names)


def test_bisect_elements_names_the_image_and_its_patches(hunt):
    """bisect elements between a clean run and the fold-order fault: vision.out and fused split by image,
    then patch; the padded patches (symmetric, so unchanged) are not among them."""
    from inkling_probe.bisect.elements import bisect_elements

    res = bisect_elements(hunt["dumps"]["ours-fp32"], _faulty(hunt, "vision_fold_order", "fp32"), "vision.out,fused")
    rows = {r["key"]: r["regions"] for r in res["diverged_keys"]}
    spans, _ = modality.layout(inkling_probe.open(hunt["dumps"]["ours-fp32"]))
    first, n = next((s[2], s[3]) for s in spans if s[0] == "image")
    for key, start in (("vision.out", 0), ("fused", first)):
        (img,) = rows[key]
        assert (img["unit"], img["start"], img["stop"]) == ("image 0", start, start + n)
        patches = [p for r in img["inside"] for p in range(r["start"], r["stop"])]
        assert patches and set(patches) < set(range(n)) and all(r["unit"] == "patches" for r in img["inside"])
    assert [r["start"] for r in rows["vision.out"][0]["inside"]] == [r["start"] for r in rows["fused"][0]["inside"]]

"""The processor against transformers (dMel features bit for bit, plan_out_scales), placeholder
expansion and its one-line errors, and the stdlib PNG/WAV readers."""
import numpy as np
import pytest
import torch

from inkling_model.config import InklingConfig
from inkling_model.multimodal.config import MultimodalConfig
from inkling_model.multimodal.media_io import read_image, read_png, read_wav, write_png, write_wav
from inkling_model.multimodal.processor import (MediaError, MediaInputs, expand_placeholders, image_patches,
                                                log_mel, media_layout, patch_grid)
from inkling_model.multimodal.vision import plan_out_scales

from mm_util import synthetic_image, synthetic_wave

CFG = InklingConfig.preset("tiny")
MM = MultimodalConfig.preset("tiny", CFG)


@pytest.mark.parametrize("samples,mels", [(3200, 8), (16000, 80), (1234, 80)])
def test_log_mel_equals_transformers(samples, mels):
    from transformers.models.inkling.feature_extraction_inkling import InklingFeatureExtractor

    w = (np.random.default_rng(0).standard_normal(samples) * 0.1).astype(np.float32)
    ref = InklingFeatureExtractor(feature_size=mels)(w, sampling_rate=16000, return_tensors="pt")["input_features"][0]
    assert torch.equal(log_mel(torch.from_numpy(w), mels, 16000), ref)


@pytest.mark.parametrize("t,p,n", [(2, 40, 6), (2, 40, 24), (2, 2, 3), (2, 4, 4), (2, 10, 4), (2, 40, 8)])
def test_plan_out_scales_equals_transformers(t, p, n):
    from transformers.models.inkling.modeling_inkling import plan_out_scales as hf_plan

    assert plan_out_scales(t, p, n, 3) == [tuple(r) for r in hf_plan(t, p, n, 3).tolist()]


def test_image_patches_grid_padding_and_frames():
    im = synthetic_image(5, 6)
    pv = image_patches(im, 2)
    rows, cols = patch_grid(5, 6, 2)
    assert (rows, cols) == (3, 4) and pv.shape == (12, 2, 2, 2, 3)
    assert torch.equal(pv[:, 0], pv[:, 1])  # a still image is two equal frames
    pad = (torch.tensor([-1.0]) * 1 - torch.tensor([0.48145466 * 255])) / (0.26862954 * 255)
    assert torch.allclose(pv[3, 0, :, :, 0], pad.expand(2, 2))  # the extra column is all padding


def test_expand_and_insert_placeholders():
    media = MediaInputs.build(MM, [synthetic_image()], [synthetic_wave()])
    ni, na = media.image_rows[0], media.audio_rows[0]
    out = expand_placeholders([1, MM.image_token_id, 7, MM.audio_token_id], MM, media)
    assert out == [1] + [MM.image_token_id] * ni + [7] + [MM.audio_token_id] * na
    assert expand_placeholders(out, MM, media) == out  # already expanded: unchanged
    ins = expand_placeholders([1, 7, 8], MM, media)
    assert ins.count(MM.image_token_id) == ni and ins[1] == MM.audio_bos_token_id or ins[1] == MM.image_bos_token_id
    spans = media_layout(torch.tensor(out), MM, media)
    assert spans == [["image", 0, 1, ni], ["audio", 0, 2 + ni, na]]


def test_placeholder_count_mismatch_is_one_error():
    media = MediaInputs.build(MM, [synthetic_image(), synthetic_image(seed=1)], [])
    with pytest.raises(MediaError, match="1 image placeholder\\(s\\) .* for 2 image\\(s\\)"):
        expand_placeholders([1, MM.image_token_id, 7], MM, media)
    with pytest.raises(MediaError, match="image placeholders .*: 3 in the prompt for 24 image feature rows"):
        media_layout(torch.tensor([1] + [MM.image_token_id] * 3), MM, media)


def test_png_and_wav_round_trip(tmp_path):
    im = synthetic_image(7, 9)
    assert np.array_equal(read_png(write_png(tmp_path / "a.png", im)), im)
    assert np.array_equal(read_image(tmp_path / "a.png"), im)
    w = synthetic_wave().numpy()
    assert np.abs(read_wav(write_wav(tmp_path / "a.wav", w)) - w).max() < 1 / 32767


def test_png_filters_match_pillow(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    im = synthetic_image(11, 13, seed=3)
    Image.fromarray(im).save(tmp_path / "p.png", optimize=True)  # Pillow picks its own row filters
    assert np.array_equal(read_png(tmp_path / "p.png"), im)


def test_bad_media_files_are_one_line(tmp_path):
    (tmp_path / "x.png").write_bytes(b"not an image")
    with pytest.raises(MediaError, match="not a PNG or JPEG"):
        read_image(tmp_path / "x.png")
    write_wav(tmp_path / "r.wav", synthetic_wave().numpy(), rate=8000)
    with pytest.raises(MediaError, match="8000 Hz"):
        read_wav(tmp_path / "r.wav")


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
def test_stdlib_png_reader_equals_pillow_on_every_filter(tmp_path, mode):
    Image = pytest.importorskip("PIL.Image")
    g = np.random.default_rng(1)
    ch = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    px = g.integers(0, 256, (9, 17, ch), dtype=np.uint8)
    px[:, :8] = px[:, :1]  # smooth runs make Pillow's adaptive filter pick sub/up/average/paeth rows
    im = Image.fromarray(px[..., 0] if ch == 1 else px, mode)
    im.save(tmp_path / "f.png", optimize=True)
    white = Image.new("RGBA", im.size, (255, 255, 255, 255))  # transformers' convert_to_rgb of a PIL image
    want = np.asarray(Image.alpha_composite(white, im.convert("RGBA")).convert("RGB"))
    assert np.array_equal(read_png(tmp_path / "f.png"), want)
    assert np.array_equal(read_image(tmp_path / "f.png"), want)  # the Pillow path alike


def _filtered_png(path, px: np.ndarray, filters) -> None:
    """An RGB PNG whose row y uses PNG filter ``filters[y % len(filters)]`` (encoded here, by the spec)."""
    import struct
    import zlib

    h, w, _ = px.shape
    rows, prev = [], np.zeros(w * 3, dtype=np.int64)
    for y in range(h):
        cur, f = px[y].reshape(-1).astype(np.int64), filters[y % len(filters)]
        a = np.concatenate([np.zeros(3, np.int64), cur[:-3]])
        c = np.concatenate([np.zeros(3, np.int64), prev[:-3]])
        p = a + prev - c
        paeth = np.where((np.abs(p - a) <= np.abs(p - prev)) & (np.abs(p - a) <= np.abs(p - c)), a,
                         np.where(np.abs(p - prev) <= np.abs(p - c), prev, c))
        pred = {0: 0, 1: a, 2: prev, 3: (a + prev) // 2, 4: paeth}[f]
        rows.append(bytes([f]) + ((cur - pred) & 0xFF).astype(np.uint8).tobytes())
        prev = cur
    chunk = lambda k, b: struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b))  # noqa: E731
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


def test_png_reader_undoes_all_five_filters(tmp_path):
    px = synthetic_image(10, 7, seed=5)
    _filtered_png(tmp_path / "f.png", px, [0, 1, 2, 3, 4])
    assert np.array_equal(read_png(tmp_path / "f.png"), px)


def test_to_rgb_composites_like_pillow_on_every_value_and_alpha():
    """RGBA / grey+alpha onto white bit-identical to Pillow's alpha_composite (transformers' convert of
    a PIL image) for every (value, alpha) pair; grey repeated; anything else one MediaError."""
    from inkling_model.multimodal.processor import to_rgb

    Image = pytest.importorskip("PIL.Image")
    v, a = np.meshgrid(np.arange(256), np.arange(256))
    rgba = np.stack([v, 255 - v, (v * 7) % 256, a], -1).astype(np.uint8)
    white = Image.new("RGBA", (256, 256), (255, 255, 255, 255))
    want = np.asarray(Image.alpha_composite(white, Image.fromarray(rgba, "RGBA")).convert("RGB"))
    assert np.array_equal(to_rgb(rgba), want)
    la = np.stack([v, a], -1).astype(np.uint8)
    want = np.asarray(Image.alpha_composite(white, Image.fromarray(la, "LA").convert("RGBA")).convert("RGB"))
    assert np.array_equal(to_rgb(la), want)
    grey = v.astype(np.uint8)
    assert np.array_equal(to_rgb(grey), np.repeat(grey[..., None], 3, 2)) and np.array_equal(to_rgb(grey[..., None]), to_rgb(grey))
    with pytest.raises(MediaError, match=r"got float32 \(2, 2, 3\)"):
        to_rgb(np.zeros((2, 2, 3), np.float32))


def test_a_resize_asked_by_the_image_processor_config_is_refused(tmp_path):
    """transformers' rescale_image_frac (a resize before patching) is not done here: refused, not ignored."""
    import json

    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.config import InklingConfig
    from inkling_model.multimodal.checkpoint import read_multimodal_config, write_multimodal_checkpoint
    from inkling_model.multimodal.config import MultimodalConfig

    cfg = InklingConfig.preset("tiny")
    ck = write_multimodal_checkpoint(cfg, MultimodalConfig.preset("tiny", cfg), tmp_path / "ck", seed=0)
    (ck / "preprocessor_config.json").write_text(json.dumps({"rescale_image_frac": None}))
    assert read_multimodal_config(ck)[1].vision.patch_size == 2  # transformers' default: accepted
    (ck / "preprocessor_config.json").write_text(json.dumps({"rescale_image_frac": 0.5}))
    with pytest.raises(CheckpointError, match=r"preprocessor_config.json: rescale_image_frac 0.5 is not supported"):
        read_multimodal_config(ck)


def test_other_pixels_asked_by_the_image_processor_config_are_refused(tmp_path):
    """Every image-processor key that changes the pixels is checked against what ours does: transformers'
    defaults written out are accepted, another mean / std / rescale / patch size is refused (it was
    silently processed with CLIP's constants and the config's patch)."""
    import json

    from inkling_model.checkpoint.shards import CheckpointError
    from inkling_model.config import InklingConfig
    from inkling_model.multimodal.checkpoint import read_multimodal_config, write_multimodal_checkpoint
    from inkling_model.multimodal.config import MultimodalConfig

    cfg = InklingConfig.preset("tiny")
    ck = write_multimodal_checkpoint(cfg, MultimodalConfig.preset("tiny", cfg), tmp_path / "ck", seed=0)
    defaults = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "rescale_factor": 0.00392156862745098,
                "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                "size": {"height": 2, "width": 2}, "rescale_image_frac": None, "resample": 1,
                "image_processor_type": "InklingImageProcessor"}
    (ck / "preprocessor_config.json").write_text(json.dumps(defaults))
    assert read_multimodal_config(ck)[1].vision.patch_size == 2
    (ck / "preprocessor_config.json").write_text(json.dumps({**defaults, "size": {"height": 2, "width": 2,
                                                                                 "longest_edge": None}}))
    assert read_multimodal_config(ck)[1].vision.patch_size == 2  # a size dict's unset fields: nothing asked
    for key, value in (("image_mean", [0.5, 0.5, 0.5]), ("image_std", [0.5, 0.5, 0.5]), ("do_normalize", False),
                       ("rescale_factor", 1 / 127.5), ("size", {"height": 4, "width": 4}), ("do_rescale", False)):
        (ck / "preprocessor_config.json").write_text(json.dumps({**defaults, key: value}))
        with pytest.raises(CheckpointError, match=rf"preprocessor_config.json: {key} .* is not supported"):
            read_multimodal_config(ck)
    (ck / "preprocessor_config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="not a JSON object"):
        read_multimodal_config(ck)

"""Media files checked from their header before decoding (issue 42): the measured cases, each failing
on the code before (a 1x100000 PNG asked for 20 GB; a 10-minute WAV took 7.1 GB; a 0x0 PNG, Pillow's
decompression-bomb error and a WAV cut mid-frame ended in exit 3), the limits as settings, and the
memory estimate held above the processor's measured peak."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from inkling_model.multimodal.media_header import image_header, wav_header
from inkling_model.multimodal.media_io import read_image, read_jpeg, read_png, read_wav, write_png
from inkling_model.multimodal.media_limits import MediaLimits
from inkling_model.multimodal.processor import MediaError
from inkling_model.multimodal.run import prepare

from media_util import chunk, ihdr, png_bytes, silent_wav, wav_bytes, PNG_SIG


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from click.testing import CliRunner

    from inkling_model.cli.make_checkpoint import command as make_checkpoint

    d = tmp_path_factory.mktemp("mmlim") / "ckpt"
    res = CliRunner().invoke(make_checkpoint, ["--preset", "tiny", "--multimodal", str(d)])
    assert res.exit_code == 0, res.output
    return str(d)


def _one_line_naming(err, path):
    text = str(err.value)
    assert "\n" not in text and str(path) in text, text
    return text


def test_wide_png_is_refused_by_the_models_positions(ckpt, tmp_path):
    p = tmp_path / "wide.png"
    p.write_bytes(png_bytes(100000, 1))  # 370 bytes; it asked for 20 GB in the tiny model's attention
    with pytest.raises(MediaError) as e:
        prepare(ckpt, [[1, 5, 8]], (str(p),), ())
    assert "50001 tokens" in _one_line_naming(e, p) and "max_position_embeddings 4096" in str(e.value)


def test_ten_minute_wav_is_refused_from_its_header(ckpt, tmp_path):
    p = tmp_path / "long.wav"
    silent_wav(p, 600)  # it took 7.1 GB
    with pytest.raises(MediaError) as e:
        prepare(ckpt, [[1, 5, 8]], (), (str(p),))
    assert "12000 tokens" in _one_line_naming(e, p)
    assert MediaLimits().check_audio(p, 600 * 16000, 1, 2, 16000) == 12000  # within the limits themselves


def test_zero_pixel_png_is_one_line(tmp_path):
    p = tmp_path / "zero.png"
    p.write_bytes(png_bytes(0, 0))
    for read in (read_image, read_png, read_jpeg):
        with pytest.raises(MediaError) as e:
            read(p)
        assert "0x0 image holds no pixels" in _one_line_naming(e, p)


def test_pillows_decompression_bomb_is_one_line(tmp_path):
    p = tmp_path / "bomb.png"
    p.write_bytes(png_bytes(13000, 14000, raw=bytes(10)))
    with pytest.raises(MediaError) as e:
        read_image(p)
    assert "over the limit of 50000000 (INKLING_MEDIA_MAX_PIXELS)" in _one_line_naming(e, p)
    with pytest.raises(MediaError) as e:  # our limit raised past Pillow's: Pillow's error, one line
        read_image(p, MediaLimits(max_pixels=10 ** 9))
    assert "decompression bomb" in _one_line_naming(e, p)


@pytest.mark.parametrize("data,msg", [
    (wav_bytes(np.zeros(1000, "<i2"))[:-1], "declares 2000 bytes of samples, the file holds 1999 (truncated)"),
    (wav_bytes(np.zeros(1000, "<i2").tobytes()[:-1]), "cut mid-frame"),
    (wav_bytes(np.zeros(10, "<i2"), channels=2, align=2), "2 channel(s) with 2-byte frames"),
    (wav_bytes(np.zeros(18, "<i2"), channels=9), "9 channels; 1 to 8"),
    (wav_bytes(np.zeros(10, "<i2"), fmt_tag=3, bits=32), "format 0x0003 is not supported"),
    (wav_bytes(np.zeros(10, "<i2"), bits=24), "24-bit samples"),
    (wav_bytes(np.zeros(10, "<i2"), rate=0), "sampled at 0 Hz"),
    (wav_bytes(b""), "without samples"),
    (b"RIFF\x00\x00\x00\x00WAVE", "without a data chunk"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_wav_is_one_line(tmp_path, data, msg):
    p = tmp_path / "x.wav"
    p.write_bytes(data)
    with pytest.raises(MediaError) as e:
        read_wav(p)
    assert msg in _one_line_naming(e, p)


def test_wav_values_and_channel_mean(tmp_path):
    x = np.array([[0, 16384], [-32768, 32767], [100, -100]], "<i2")
    p = tmp_path / "s.wav"
    p.write_bytes(wav_bytes(x, channels=2))
    assert np.array_equal(read_wav(p), ((x / 32768.0).astype(np.float32)).mean(axis=1, dtype=np.float32))
    assert wav_header(p).frames == 3


def _jpeg(w=16, h=8) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _sof_at(data: bytes) -> int:
    i = 2
    while data[i + 1] not in (0xC0, 0xC2):
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return i


def test_jpeg_header_size_is_checked_before_decoding(tmp_path):
    data = bytearray(_jpeg())
    p = tmp_path / "a.jpg"
    p.write_bytes(bytes(data))
    assert image_header(p).width == 16 and image_header(p).height == 8 and read_image(p).shape == (8, 16, 3)
    i = _sof_at(bytes(data))
    data[i + 5:i + 9] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")  # 3.6 G pixels, 700 bytes
    p.write_bytes(bytes(data))
    with pytest.raises(MediaError) as e:
        read_image(p)
    assert "60000x60000 = 3600000000 pixels" in _one_line_naming(e, p)
    p.write_bytes(_jpeg()[:300])
    with pytest.raises(MediaError) as e:
        read_image(p)
    _one_line_naming(e, p)


def test_png_chunks_are_crc_checked_and_inflated_no_further_than_declared(tmp_path):
    p = tmp_path / "a.png"
    good = png_bytes(4, 3, raw=bytes(range(3 * 13)))
    p.write_bytes(good[:-20] + bytes([good[-20] ^ 1]) + good[-19:])  # a flipped byte in the IDAT
    with pytest.raises(MediaError, match="CRC"):
        read_png(p)
    extra = PNG_SIG + ihdr(4, 3) + chunk(b"IDAT", __import__("zlib").compress(bytes(10 ** 6))) + chunk(b"IEND", b"")
    p.write_bytes(extra)  # 1 MB of rows behind a 4x3 header: refused, not inflated
    with pytest.raises(MediaError, match="more than 39 bytes"):
        read_png(p)
    assert read_png(write_png(p, np.full((3, 4, 3), 7, np.uint8))).shape == (3, 4, 3)


def test_limits_are_settings(monkeypatch, tmp_path):
    p = write_png(tmp_path / "a.png", np.zeros((10, 10, 3), np.uint8))
    monkeypatch.setenv("INKLING_MEDIA_MAX_PIXELS", "99")
    with pytest.raises(MediaError, match=r"10x10 = 100 pixels, over the limit of 99 \(INKLING_MEDIA_MAX_PIXELS\)"):
        read_image(p)
    for bad in ("nan", "-1", "1.5", "lots"):
        monkeypatch.setenv("INKLING_MEDIA_MAX_PIXELS", bad)
        with pytest.raises(MediaError, match=f"INKLING_MEDIA_MAX_PIXELS={bad!r}"):
            MediaLimits.from_env()
    monkeypatch.delenv("INKLING_MEDIA_MAX_PIXELS")
    with pytest.raises(MediaError, match="needs about .* MiB to process, over the budget of 1 MiB"):
        MediaLimits(memory_mib=1).check_image(p, 1000, 1000, 3, 40, 2)


_MEASURE = """
import json, resource, sys
import numpy as np, torch
from inkling_model.config import InklingConfig
from inkling_model.multimodal.config import MultimodalConfig
from inkling_model.multimodal.media_limits import IMAGE_BYTES_PER_PIXEL, MediaLimits
from inkling_model.multimodal.processor import MediaInputs
mm = MultimodalConfig.preset("full", InklingConfig.preset("full"))
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
im = np.random.default_rng(0).integers(0, 256, (800, 1000, 4), dtype=np.uint8)
base = rss(); MediaInputs.build(mm, [im], []); img = rss() - base + im.nbytes
base = rss(); MediaInputs.build(mm, [], [np.zeros(60 * 16000, np.float32)]); aud = rss() - base
print(json.dumps([img, aud]))
"""


def test_memory_estimate_is_above_the_processors_measured_peak():
    out = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    img, aud = json.loads(out.stdout.strip().splitlines()[-1])
    budget = lambda check: _estimate(check)  # noqa: E731
    assert img <= budget(lambda lim: lim.check_image("x", 1000, 800, 4, 40, 2)), img
    assert aud <= budget(lambda lim: lim.check_audio("x", 60 * 16000, 1, 2, 16000)), aud


def _estimate(check) -> float:
    """The estimate in bytes, read back from the budget error of a tiny budget."""
    import re

    with pytest.raises(MediaError) as e:
        check(MediaLimits(memory_mib=1e-9))
    return float(re.search(r"about (\d+) MiB", str(e.value)).group(1)) * (1 << 20)

"""Property tests (hypothesis, seeded) of the media readers: PNG, JPEG and WAV files, valid or with
mutated headers and bodies (sizes, chunk lengths, sample rates, channels, frame sizes, truncation,
byte flips), read in-process through the Python API. Every case either returns the right pixels or
samples (a valid file: exactly; a mutated one: the shape its header declares) or raises one
:class:`MediaError` line naming the file, never another exception; its traced peak memory stays under
a bound proportional to the file's size (the limits held small) and its time under a second.
"""

import io
import struct
import time
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from inkling_model.multimodal.media_header import image_header
from inkling_model.multimodal.media_io import read_image, read_png, read_wav, write_png
from inkling_model.multimodal.media_limits import MediaLimits
from inkling_model.multimodal.processor import MediaError, to_rgb

from media_util import PNG_SIG, chunk, ihdr, wav_bytes

LIMITS = MediaLimits(max_pixels=64 * 64, max_seconds=0.5, max_channels=4, memory_mib=8)
SETTINGS = dict(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MAX_SECONDS = 1.0


def _memory_bound(size: int) -> int:
    """Traced bytes a read may hold at its peak: a constant, plus a multiple of the file, plus what
    the limits let a header declare (64 x 64 RGBA, decoded and converted a few times)."""
    return (256 << 10) + 64 * size + 64 * 64 * 4 * 16


def _outcome(read, path, size: int):
    """(the array or the MediaError) with the case's peak memory and time checked."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        got = read(path)
    except MediaError as e:
        got = e
    finally:
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak <= _memory_bound(size), (peak, size)
    assert elapsed < MAX_SECONDS, elapsed
    if isinstance(got, MediaError):
        text = str(got)
        assert "\n" not in text and str(path) in text, text
    return got


@pytest.fixture(scope="module", autouse=True)
def warm(tmp_path_factory):
    """First reads import Pillow's plugins and codecs (a megabyte, once): not the case's memory."""
    from PIL import Image

    Image.init()
    d = tmp_path_factory.mktemp("warm")
    p = write_png(d / "w.png", np.zeros((2, 2, 3), np.uint8))
    read_image(p, LIMITS), read_png(p, LIMITS)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(d / "w.jpg")
    read_image(d / "w.jpg", LIMITS)
    (d / "w.wav").write_bytes(wav_bytes(np.zeros(4, "<i2")))
    read_wav(d / "w.wav", 16000, LIMITS)


# -- PNG --------------------------------------------------------------------------------------------
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


@st.composite
def png_files(draw):
    """(bytes, pixels [H, W, C] or None when mutated)."""
    w, h = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    color = draw(st.sampled_from(sorted(CHANNELS)))
    ch = CHANNELS[color]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))  # bulk data from a seed: cheap to draw
    px = rng.integers(0, 256, (h, w, ch), dtype=np.uint8)
    filters = rng.integers(0, 5, h).tolist()
    raw = b"".join(bytes([f]) + _filter(f, px, y, ch) for y, f in enumerate(filters))
    idat = zlib.compress(raw, draw(st.integers(0, 9)))
    cut = draw(st.integers(1, max(1, len(idat))))  # IDAT split in two chunks
    data = PNG_SIG + ihdr(w, h, color=color) + chunk(b"IDAT", idat[:cut]) + chunk(b"IDAT", idat[cut:]) \
        + chunk(b"IEND", b"")
    mutated = draw(st.lists(_png_mutation(), max_size=3))
    for m in mutated:
        data = m(data)
    return data, (None if mutated else px)


def _filter(f: int, px: np.ndarray, y: int, bpp: int) -> bytes:
    """Row ``y`` of ``px`` encoded with PNG filter ``f`` (the encoder's side of the five filters)."""
    cur = px[y].reshape(-1).astype(np.int64)
    prev = px[y - 1].reshape(-1).astype(np.int64) if y else np.zeros_like(cur)
    left = np.concatenate([np.zeros(bpp, np.int64), cur[:-bpp]])
    upleft = np.concatenate([np.zeros(bpp, np.int64), prev[:-bpp]])
    if f == 0:
        pred = np.zeros_like(cur)
    elif f == 1:
        pred = left
    elif f == 2:
        pred = prev
    elif f == 3:
        pred = (left + prev) // 2
    else:
        p = left + prev - upleft
        pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
        pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
    return ((cur - pred) & 0xFF).astype(np.uint8).tobytes()


def _png_mutation():
    u32 = st.one_of(st.integers(0, 70), st.integers(0, 2 ** 32 - 1))
    return st.one_of(
        st.builds(lambda i, b: lambda d: _flip(d, i, b), st.integers(0, 10 ** 4), st.integers(1, 255)),
        st.builds(lambda i: lambda d: d[:i % max(1, len(d))], st.integers(0, 10 ** 4)),
        st.builds(lambda w, h: lambda d: _set_ihdr(d, w, h), u32, u32),  # dims, CRC kept right
        st.builds(lambda dep, col: lambda d: _set_ihdr(d, None, None, dep, col), st.sampled_from([1, 2, 4, 8, 16, 7]),
                  st.sampled_from([0, 2, 3, 4, 6, 5])),
        st.builds(lambda n: lambda d: d[:33] + struct.pack(">I", n) + d[37:], u32),  # the first IDAT's length
        st.builds(lambda body: lambda d: d[:33] + chunk(b"tEXt", body) + d[33:], st.binary(max_size=40)),
    )


def _flip(d: bytes, i: int, bits: int) -> bytes:
    if not d:
        return d
    i %= len(d)
    return d[:i] + bytes([d[i] ^ bits]) + d[i + 1:]


def _set_ihdr(d: bytes, w, h, depth=None, color=None) -> bytes:
    if len(d) < 33:
        return d
    ow, oh, odep, ocol, rest = struct.unpack(">IIBB3s", d[16:29])
    body = struct.pack(">IIBB3s", ow if w is None else w, oh if h is None else h, odep if depth is None else depth,
                       ocol if color is None else color, rest)
    return d[:8] + chunk(b"IHDR", body) + d[33:]


@settings(max_examples=700, **SETTINGS)
@given(case=png_files())
def test_png_reads_right_or_is_one_line(tmp_path_factory, case):
    data, px = case
    path = tmp_path_factory.getbasetemp() / "prop.png"
    path.write_bytes(data)
    for read in (lambda p: read_image(p, LIMITS), lambda p: read_png(p, LIMITS)):
        got = _outcome(read, path, len(data))
        if px is not None:
            assert not isinstance(got, MediaError), got
            assert np.array_equal(got, to_rgb(px))
        elif not isinstance(got, MediaError):
            hdr = image_header(path)
            assert got.dtype == np.uint8 and got.shape == (hdr.height, hdr.width, 3)


# -- JPEG -------------------------------------------------------------------------------------------
@st.composite
def jpeg_files(draw):
    from PIL import Image

    w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    mode = draw(st.sampled_from(["L", "RGB", "CMYK"]))
    seed = draw(st.integers(0, 2 ** 16))
    arr = np.random.default_rng(seed).integers(0, 256, (h, w, len(mode)), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr[..., 0] if mode == "L" else arr, mode).save(
        buf, "JPEG", quality=draw(st.integers(5, 95)), progressive=draw(st.booleans()))
    data = buf.getvalue()
    mutated = draw(st.lists(st.one_of(
        st.builds(lambda i, b: lambda d: _flip(d, i, b), st.integers(0, 10 ** 4), st.integers(1, 255)),
        st.builds(lambda i: lambda d: d[:i % max(1, len(d))], st.integers(0, 10 ** 4)),
        st.builds(lambda hw: lambda d: _set_sof(d, hw), st.tuples(st.integers(0, 65535), st.integers(0, 65535))),
    ), max_size=3))
    for m in mutated:
        data = m(data)
    return data, (w, h, not mutated)


def _set_sof(d: bytes, hw) -> bytes:
    i = 2
    while i + 4 <= len(d) and d[i] == 0xFF and d[i + 1] not in (0xC0, 0xC1, 0xC2, 0xDA):
        i += 2 + int.from_bytes(d[i + 2:i + 4], "big")
    if i + 9 > len(d) or d[i + 1] == 0xDA:
        return d
    return d[:i + 5] + struct.pack(">HH", *hw) + d[i + 9:]


@settings(max_examples=300, **SETTINGS)
@given(case=jpeg_files())
def test_jpeg_reads_right_or_is_one_line(tmp_path_factory, case):
    data, (w, h, valid) = case
    path = tmp_path_factory.getbasetemp() / "prop.jpg"
    path.write_bytes(data)
    got = _outcome(lambda p: read_image(p, LIMITS), path, len(data))
    if valid:
        assert not isinstance(got, MediaError), got
    if not isinstance(got, MediaError):
        hdr = image_header(path)
        assert got.dtype == np.uint8 and got.shape == (hdr.height, hdr.width, 3)
        assert not valid or got.shape == (h, w, 3)


# -- WAV --------------------------------------------------------------------------------------------
WIDTHS = {8: np.uint8, 16: np.dtype("<i2"), 32: np.dtype("<i4")}


@st.composite
def wav_files(draw):
    """(bytes, expected mono float32 or None when mutated)."""
    ch, bits = draw(st.integers(1, 3)), draw(st.sampled_from(sorted(WIDTHS)))
    n = draw(st.integers(1, 3000))
    seed = draw(st.integers(0, 2 ** 16))
    info = np.iinfo(WIDTHS[bits])
    pcm = np.random.default_rng(seed).integers(info.min, info.max, (n, ch), endpoint=True).astype(WIDTHS[bits])
    data = wav_bytes(pcm, channels=ch, bits=bits)
    mutated = draw(st.lists(st.one_of(
        st.builds(lambda i, b: lambda d: _flip(d, i, b), st.integers(0, 10 ** 4), st.integers(1, 255)),
        st.builds(lambda i: lambda d: d[:i % max(1, len(d))], st.integers(0, 10 ** 5)),
        st.builds(lambda off, v: lambda d: _set_field(d, off, v), st.sampled_from([22, 24, 32, 34, 40]),
                  st.one_of(st.integers(0, 70), st.integers(0, 2 ** 32 - 1))),
        st.builds(lambda body: lambda d: d[:12] + b"LIST" + struct.pack("<I", len(body)) + body + d[12:],
                  st.binary(max_size=9)),
    ), max_size=3))
    for m in mutated:
        data = m(data)
    zero, scale = (128.0, 128.0) if bits == 8 else (0.0, float(-int(info.min)))
    want = ((pcm.astype(np.float32) - zero) / scale).mean(axis=1, dtype=np.float32)
    return data, (None if mutated else want)


def _set_field(d: bytes, off: int, v: int) -> bytes:
    """Set a fmt/data header field (22 channels, 24 rate, 32 align, 34 bits: 2 bytes but rate; 40 data length)."""
    fmt = "<I" if off in (24, 40) else "<H"
    v %= 2 ** (8 * struct.calcsize(fmt))
    return d[:off] + struct.pack(fmt, v) + d[off + struct.calcsize(fmt):] if len(d) >= off + 4 else d


@settings(max_examples=700, **SETTINGS)
@given(case=wav_files())
def test_wav_reads_right_or_is_one_line(tmp_path_factory, case):
    data, want = case
    path = tmp_path_factory.getbasetemp() / "prop.wav"
    path.write_bytes(data)
    got = _outcome(lambda p: read_wav(p, 16000, LIMITS), path, len(data))
    if want is not None:
        assert not isinstance(got, MediaError), got
        assert np.array_equal(got, want)
    elif not isinstance(got, MediaError):
        assert got.dtype == np.float32 and got.ndim == 1 and 0 < got.size <= 0.5 * 16000

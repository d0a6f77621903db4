"""Reading and writing media files with the standard library: PNG (zlib), WAV; JPEG through Pillow
when it is installed. Nothing is downloaded; bad files are one-line :class:`MediaError`s naming the
file. Every reader checks the header (:mod:`media_header`) against :class:`MediaLimits` before it
decodes anything, so memory and time are bounded by what the limits allow, never by what a file claims.

PNG: Pillow when installed, else the stdlib reader; 8-bit greyscale, RGB, grey+alpha or RGBA, non-interlaced
(converted to RGB as transformers does for a PIL image: grey repeated over 3 channels, transparency
composited onto white, :func:`processor.to_rgb`). WAV: 16-bit (or 8/32-bit) PCM, mono or the
channel mean (read with numpy from the data chunk), at the processor's sampling rate (16 kHz; no resampling: another rate is an error).
"""

from __future__ import annotations

import struct
import wave
import zlib
from pathlib import Path

import numpy as np

from .media_header import PNG_SIG, ImageHeader, image_header, png_header, wav_header
from .media_limits import MediaLimits, check_rate
from .processor import MediaError, to_rgb

_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}
_PILLOW_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error, IndexError, TypeError)
# what Pillow raises on a broken file (SyntaxError: a broken PNG chunk; found by tests/model/test_media_props.py)


def _chunks(data: bytes, path):
    pos = len(PNG_SIG)
    while pos + 12 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc = data[pos + 8 + n:pos + 12 + n]
        if len(crc) < 4:
            break
        if zlib.crc32(kind + body) & 0xFFFFFFFF != struct.unpack(">I", crc)[0]:
            raise MediaError(f"{path}: PNG chunk {kind!r} at byte {pos} fails its CRC")
        yield kind, body
        pos += 12 + n
    if pos != len(data):
        raise MediaError(f"{path}: truncated PNG")


def _unfilter(raw: bytes, h: int, stride: int, bpp: int, path) -> np.ndarray:
    """Undo PNG's per-row filters; 0 (none), 1 (sub) and 2 (up) vectorised, 3 and 4 per byte."""
    data = np.frombuffer(raw, np.uint8).reshape(h, stride + 1)
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(h):
        f, line = int(data[y, 0]), data[y, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:  # sub: a running sum per byte lane of the pixel
            cur = np.cumsum(line.reshape(-1, bpp), axis=0).reshape(-1) & 0xFF
        elif f == 2:
            cur = (line + prev) & 0xFF
        elif f in (3, 4):
            cur = _unfilter_slow(f, line, prev, bpp)
        else:
            raise MediaError(f"{path}: bad PNG filter type {f} in row {y}")
        out[y], prev = cur, cur
    return out


def _unfilter_slow(f: int, line: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    cur = np.zeros(len(line), dtype=np.int64)
    for x in range(len(line)):
        a = cur[x - bpp] if x >= bpp else 0
        b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
        if f == 3:
            pred = (a + b) // 2
        else:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        cur[x] = (line[x] + pred) & 0xFF
    return cur


def read_png(path, limits: MediaLimits | None = None) -> np.ndarray:
    """A PNG file -> RGB uint8 [H, W, 3] with the standard library (every chunk's CRC checked; the
    data inflated no further than the header's size, which ``limits`` bounds first)."""
    hdr = _checked(png_header(path), path, limits)
    data = Path(path).read_bytes()
    header, idat = None, []
    for kind, body in _chunks(data, path):
        if kind == b"IHDR":
            if header is not None or len(body) != 13:
                raise MediaError(f"{path}: PNG with a second or malformed IHDR chunk")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    w, h, depth, color, _, _, interlace = header
    if depth != 8 or color not in _CHANNELS or interlace:
        raise MediaError(f"{path}: PNG bit depth {depth}, colour type {color}, interlace {interlace} is not "
                         "supported without Pillow (8-bit grey/RGB/RGBA, non-interlaced)")
    ch = _CHANNELS[color]
    want = hdr.height * (hdr.width * ch + 1)
    z = zlib.decompressobj()
    try:
        raw = z.decompress(b"".join(idat), want)
    except zlib.error as e:
        raise MediaError(f"{path}: corrupt PNG data ({e})") from None
    if len(raw) != want or not z.eof:
        raise MediaError(f"{path}: PNG data holds {'more than ' if len(raw) == want else ''}{len(raw)} bytes, "
                         f"{want} expected")
    return to_rgb(_unfilter(raw, h, w * ch, ch, path).reshape(h, w, ch))


def write_png(path, rgb: np.ndarray) -> Path:
    """Write RGB uint8 [H, W, 3] as an 8-bit PNG (filter 0)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    p = Path(path)
    p.write_bytes(PNG_SIG + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                  + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return p


def read_jpeg(path, limits: MediaLimits | None = None) -> np.ndarray:
    """A JPEG (or PNG) file -> RGB uint8 [H, W, 3] through Pillow (needed), its size checked first."""
    return _read_pillow(path, _checked(image_header(path), path, limits))


def _read_pillow(path, hdr: ImageHeader) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise MediaError(f"{path}: reading JPEG needs Pillow (pip install pillow); PNG needs nothing") from None
    try:
        with Image.open(path) as im:
            if im.size != (hdr.width, hdr.height):
                raise MediaError(f"{path}: Pillow reads a {im.size[0]}x{im.size[1]} image where the header "
                                 f"declares {hdr.width}x{hdr.height}")
            alpha = "A" in im.getbands() or im.info.get("transparency") is not None
            return to_rgb(np.asarray(im.convert("RGBA" if alpha else "RGB")))
    except Image.DecompressionBombError as e:
        raise MediaError(f"{path}: Pillow refuses it as a decompression bomb ({e})") from None
    except _PILLOW_ERRORS as e:
        raise MediaError(f"{path}: not a readable image ({type(e).__name__}: {_one_line(e)})") from None


def read_image(path, limits: MediaLimits | None = None) -> np.ndarray:
    """PNG or JPEG (by content) -> RGB uint8 [H, W, 3]: the header checked against ``limits`` (default:
    :meth:`MediaLimits.from_env`) first; PNG through Pillow when it is installed, else the stdlib reader."""
    hdr = _checked(image_header(path), path, limits)
    if hdr.kind == "png" and not _have_pillow():
        return read_png(path, limits)
    return _read_pillow(path, hdr)


def read_wav(path, rate: int = 16000, limits: MediaLimits | None = None) -> np.ndarray:
    """A PCM WAV file -> mono float32 waveform in [-1, 1] at ``rate``: the header (rate, channels,
    length, the data against the file's size) checked against ``limits`` before any sample is read."""
    hdr = wav_header(path)
    check_rate(path, hdr.rate, rate)
    (limits or MediaLimits.from_env()).check_clip(path, hdr.frames, hdr.channels, hdr.width, hdr.rate)
    dtype, zero, scale = _PCM[hdr.width]
    with open(path, "rb") as f:
        f.seek(hdr.offset)
        pcm = np.fromfile(f, dtype=dtype, count=hdr.frames * hdr.channels)
    if pcm.size != hdr.frames * hdr.channels:
        raise MediaError(f"{path}: WAV ends after {pcm.size} of its {hdr.frames * hdr.channels} samples")
    x = (pcm.astype(np.float32) - zero) / scale
    return x.reshape(-1, hdr.channels).mean(axis=1, dtype=np.float32)


_PCM = {1: (np.uint8, 128.0, 128.0), 2: (np.dtype("<i2"), 0.0, 32768.0), 4: (np.dtype("<i4"), 0.0, 2.0 ** 31)}


def _checked(hdr: ImageHeader, path, limits: MediaLimits | None) -> ImageHeader:
    (limits or MediaLimits.from_env()).check_pixels(path, hdr.width, hdr.height)
    return hdr


def _have_pillow() -> bool:
    import importlib.util

    return importlib.util.find_spec("PIL") is not None


def _one_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:200]


def write_wav(path, wave_f32: np.ndarray, rate: int = 16000) -> Path:
    """Write a mono float waveform as 16-bit PCM."""
    pcm = (np.clip(np.asarray(wave_f32, dtype=np.float64), -1, 1) * 32767).round().astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())
    return Path(path)

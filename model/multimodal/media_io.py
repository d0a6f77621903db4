"""Reading and writing media files with the standard library: PNG (zlib), WAV (wave); JPEG through
Pillow when it is installed. Nothing is downloaded; bad files are one-line :class:`MediaError`s.

PNG: Pillow when installed, else the stdlib reader; 8-bit greyscale, RGB, grey+alpha or RGBA, non-interlaced
(converted to RGB as transformers does for a PIL image: grey repeated over 3 channels, transparency
composited onto white, :func:`processor.to_rgb`). WAV: 16-bit (or 8/32-bit) PCM, mono or the
channel mean, at the processor's sampling rate (16 kHz; no resampling: another rate is an error).
"""

from __future__ import annotations

import struct
import wave
import zlib
from pathlib import Path

import numpy as np

from .processor import MediaError, to_rgb

_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def _chunks(data: bytes, path):
    pos = len(_PNG_SIG)
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        yield kind, data[pos + 8:pos + 8 + n]
        pos += 12 + n
    if pos != len(data):
        raise MediaError(f"{path}: truncated PNG")


def _unfilter(raw: bytes, h: int, stride: int, bpp: int) -> np.ndarray:
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
            raise MediaError(f"bad PNG filter type {f}")
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


def read_png(path) -> np.ndarray:
    """A PNG file -> RGB uint8 [H, W, 3]."""
    data = Path(path).read_bytes()
    if not data.startswith(_PNG_SIG):
        raise MediaError(f"{path}: not a PNG file")
    header, idat = None, b""
    for kind, body in _chunks(data, path):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    if header is None:
        raise MediaError(f"{path}: PNG without IHDR")
    w, h, depth, color, _, _, interlace = header
    if depth != 8 or color not in _CHANNELS or interlace:
        raise MediaError(f"{path}: PNG bit depth {depth}, colour type {color}, interlace {interlace} is not "
                         "supported (8-bit grey/RGB/RGBA, non-interlaced)")
    ch = _CHANNELS[color]
    try:
        raw = zlib.decompress(idat)
    except zlib.error as e:
        raise MediaError(f"{path}: corrupt PNG data ({e})") from None
    if len(raw) != h * (w * ch + 1):
        raise MediaError(f"{path}: PNG data holds {len(raw)} bytes, {h * (w * ch + 1)} expected")
    return to_rgb(_unfilter(raw, h, w * ch, ch).reshape(h, w, ch))


def write_png(path, rgb: np.ndarray) -> Path:
    """Write RGB uint8 [H, W, 3] as an 8-bit PNG (filter 0)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    p = Path(path)
    p.write_bytes(_PNG_SIG + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                  + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return p


def read_jpeg(path) -> np.ndarray:
    """A JPEG file -> RGB uint8 [H, W, 3] (needs Pillow)."""
    try:
        from PIL import Image
    except ImportError:
        raise MediaError(f"{path}: reading JPEG needs Pillow (pip install pillow); PNG needs nothing") from None
    try:
        with Image.open(path) as im:
            alpha = "A" in im.getbands() or im.info.get("transparency") is not None
            return to_rgb(np.asarray(im.convert("RGBA" if alpha else "RGB")))
    except OSError as e:
        raise MediaError(f"{path}: not a readable image ({e})") from None


def read_image(path) -> np.ndarray:
    """PNG or JPEG (by content) -> RGB uint8 [H, W, 3]."""
    p = Path(path)
    if not p.is_file():
        raise MediaError(f"{path}: no such file")
    head = p.read_bytes()[:8]
    if head.startswith(_PNG_SIG):
        try:  # Pillow decodes large PNGs fast; the stdlib reader gives the same pixels (tested)
            return read_jpeg(p)
        except MediaError:
            return read_png(p)
    if head.startswith(b"\xff\xd8"):
        return read_jpeg(p)
    raise MediaError(f"{path}: not a PNG or JPEG file")


def read_wav(path, rate: int = 16000) -> np.ndarray:
    """A PCM WAV file -> mono float32 waveform in [-1, 1] at ``rate``."""
    p = Path(path)
    if not p.is_file():
        raise MediaError(f"{path}: no such file")
    try:
        with wave.open(str(p), "rb") as f:
            ch, width, sr, n = f.getnchannels(), f.getsampwidth(), f.getframerate(), f.getnframes()
            data = f.readframes(n)
    except (wave.Error, EOFError) as e:
        raise MediaError(f"{path}: not a PCM WAV file ({e})") from None
    if sr != rate:
        raise MediaError(f"{path}: sampled at {sr} Hz; the processor takes {rate} Hz (resample it first)")
    kinds = {1: (np.uint8, 128.0, 128.0), 2: (np.int16, 0.0, 32768.0), 4: (np.int32, 0.0, 2.0 ** 31)}
    if width not in kinds:
        raise MediaError(f"{path}: {8 * width}-bit samples are not supported (8, 16 or 32-bit PCM)")
    dtype, zero, scale = kinds[width]
    x = (np.frombuffer(data, dtype=dtype).astype(np.float32) - zero) / scale
    x = x.reshape(-1, ch).mean(axis=1)
    if x.size == 0:
        raise MediaError(f"{path}: no samples")
    return x.astype(np.float32)


def write_wav(path, wave_f32: np.ndarray, rate: int = 16000) -> Path:
    """Write a mono float waveform as 16-bit PCM."""
    pcm = (np.clip(np.asarray(wave_f32, dtype=np.float64), -1, 1) * 32767).round().astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())
    return Path(path)

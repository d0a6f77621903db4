"""Test helpers: PNG and WAV files byte by byte (any header, lying or not), and the measured cases of
issue 42 (a 1x100000 PNG of 470 bytes, a 9000x9000 PNG of 255 KB, a 10-minute WAV)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

PNG_SIG = b"\x89PNG\r\n\x1a\n"


def chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk with its length and CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def ihdr(w: int, h: int, depth: int = 8, color: int = 2, interlace: int = 0) -> bytes:
    return chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))


def png_bytes(w: int, h: int, raw: bytes | None = None, color: int = 2, level: int = 9) -> bytes:
    """A PNG declaring ``w`` x ``h``; ``raw`` the filtered rows (default: zeros, filter 0)."""
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw = bytes(h * (w * ch + 1)) if raw is None else raw
    return PNG_SIG + ihdr(w, h, color=color) + chunk(b"IDAT", zlib.compress(raw, level)) + chunk(b"IEND", b"")


def zero_png_streamed(path, w: int, h: int, rows: int = 100) -> int:
    """An RGB PNG of zeros, its size (a 9000x9000 image of 255 KB in milliseconds, without its 243 MB):
    ``rows`` rows deflated once and ended by a full flush, which resets the history, so the same bytes
    deflate every later block; then an empty final block and the Adler-32 of all the rows."""
    assert h % rows == 0
    block = bytes(rows * (w * 3 + 1))
    z = zlib.compressobj(9)
    first = z.compress(block) + z.flush(zlib.Z_FULL_FLUSH)
    again = z.compress(block) + z.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(h // rows):
        adler = zlib.adler32(block, adler)
    idat = first + again * (h // rows - 1) + b"\x03\x00" + struct.pack(">I", adler)
    data = PNG_SIG + ihdr(w, h) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def wav_bytes(samples: np.ndarray | bytes, channels: int = 1, rate: int = 16000, bits: int = 16,
              data_len: int | None = None, fmt_tag: int = 1, align: int | None = None) -> bytes:
    """A RIFF/WAVE file; ``data_len`` / ``align`` may lie about the data and the frame size."""
    data = samples if isinstance(samples, bytes) else np.asarray(samples).tobytes()
    width = bits // 8
    align = channels * width if align is None else align
    fmt = struct.pack("<HHIIHH", fmt_tag, channels, rate, rate * align, align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt \
        + b"data" + struct.pack("<I", len(data) if data_len is None else data_len) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def silent_wav(path, seconds: float, rate: int = 16000) -> None:
    """A mono 16-bit clip of zeros, written without building it in memory twice."""
    n = int(seconds * rate)
    with open(path, "wb") as f:
        head = wav_bytes(b"", data_len=2 * n)  # the 44-byte header, then zeros
        f.write(head[:4] + struct.pack("<I", 36 + 2 * n) + head[8:])
        f.truncate(44 + 2 * n)

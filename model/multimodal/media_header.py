"""What a media file declares, read from its header alone: nothing is decoded, and at most a few
kilobytes are read (a JPEG's markers are skipped by seeking), so a file's size can be checked
(:mod:`media_limits`) before it is decoded.

PNG: the IHDR chunk, which must come first (its CRC checked). JPEG: the first start-of-frame
segment before the scan. WAV: the RIFF chunks up to ``data`` (``fmt `` before it), the data's
declared length checked against the file: a clip cut short or mid-frame is refused here.
Every problem is one :class:`MediaError` naming the file.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from .processor import MediaError

PNG_SIG = b"\x89PNG\r\n\x1a\n"
JPEG_SIG = b"\xff\xd8"
PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel (3: palette)
# start-of-frame markers: C0-CF but DHT (C4), JPG (C8) and DAC (CC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM, RSTn: no length field
MAX_SEGMENTS = 4096  # JPEG segments (or WAV chunks) before the frame header (or data): a real file has tens
MAX_PNG_CHUNKS = 1 << 20  # a 100 MB image stream in 8 KB IDAT chunks is 12800
WAV_FORMATS = {1: "PCM"}
WAV_WIDTHS = (1, 2, 4)


@dataclass(frozen=True)
class ImageHeader:
    """An image's kind (``"png"`` / ``"jpeg"``), size and bytes per pixel once decoded (at most)."""

    kind: str
    width: int
    height: int
    channels: int


@dataclass(frozen=True)
class WavHeader:
    """A PCM WAV's layout: ``frames`` samples per channel at ``offset``, ``width`` bytes a sample."""

    channels: int
    width: int
    rate: int
    frames: int
    offset: int


def image_kind(path) -> str:
    """``"png"`` or ``"jpeg"`` by content; MediaError for anything else (or no regular file)."""
    head = _read_at(path, 0, 8)
    if head.startswith(PNG_SIG):
        return "png"
    if head.startswith(JPEG_SIG):
        return "jpeg"
    raise MediaError(f"{path}: not a PNG or JPEG file")


def image_header(path) -> ImageHeader:
    """The declared size of a PNG or JPEG file (by content)."""
    return png_header(path) if image_kind(path) == "png" else jpeg_header(path)


def png_header(path) -> ImageHeader:
    """A PNG's IHDR: its first chunk, 13 bytes, CRC checked."""
    head = _read_at(path, 0, 33)
    if not head.startswith(PNG_SIG):
        raise MediaError(f"{path}: not a PNG file")
    if len(head) < 33 or head[8:16] != b"\x00\x00\x00\x0dIHDR":
        raise MediaError(f"{path}: PNG without an IHDR chunk first")
    body, crc = head[16:29], struct.unpack(">I", head[29:33])[0]
    if zlib.crc32(b"IHDR" + body) & 0xFFFFFFFF != crc:
        raise MediaError(f"{path}: PNG header (IHDR) fails its CRC")
    w, h, depth, color = struct.unpack(">IIBB", body[:10])
    if color not in PNG_CHANNELS or depth not in (1, 2, 4, 8, 16):
        raise MediaError(f"{path}: PNG bit depth {depth}, colour type {color} is not a PNG image type")
    _png_chunks_fit(path)
    return ImageHeader("png", w, h, 4 if color == 3 else PNG_CHANNELS[color] * max(1, depth // 8))


def _png_chunks_fit(path) -> None:
    """Every chunk up to IEND lies within the file (their headers read by seeking): a decoder that
    allocates what a chunk declares (Pillow does) is never handed a 4 GB length in a 100-byte file."""
    f, size = _open(path)
    with f:
        pos = len(PNG_SIG)
        for _ in range(MAX_PNG_CHUNKS):
            f.seek(pos)
            head = f.read(8)
            if len(head) < 8:
                raise MediaError(f"{path}: PNG ends at byte {pos} without an IEND chunk")
            n, kind = struct.unpack(">I4s", head)
            if pos + 12 + n > size:
                raise MediaError(f"{path}: PNG chunk {kind!r} at byte {pos} declares {n} bytes, past the end of "
                                 f"the file ({size} bytes)")
            if kind == b"IEND":
                return
            pos += 12 + n
    raise MediaError(f"{path}: PNG with more than {MAX_PNG_CHUNKS} chunks")


def jpeg_header(path) -> ImageHeader:
    """A JPEG's first start-of-frame segment (markers before it skipped by seeking)."""
    f, size = _open(path)
    with f:
        if f.read(2) != JPEG_SIG:
            raise MediaError(f"{path}: not a JPEG file")
        for _ in range(MAX_SEGMENTS):
            marker = _next_marker(f, path)
            if marker in _STANDALONE:
                continue
            if marker in (0xD9, 0xDA):
                raise MediaError(f"{path}: JPEG without a frame header before its scan")
            n = _u16(f.read(2), path)
            if n < 2 or f.tell() + n - 2 > size:
                raise MediaError(f"{path}: JPEG segment {marker:#04x} of {n} bytes runs past the file")
            if marker in _SOF:
                body = f.read(6)
                if n < 8 or len(body) < 6:
                    raise MediaError(f"{path}: JPEG frame header too short")
                _, h, w, comps = struct.unpack(">BHHB", body)
                if comps not in (1, 3, 4):
                    raise MediaError(f"{path}: JPEG with {comps} components (1, 3 or 4 are images)")
                return ImageHeader("jpeg", w, h, 4)
            f.seek(n - 2, os.SEEK_CUR)
    raise MediaError(f"{path}: JPEG without a frame header in its first {MAX_SEGMENTS} segments")


def _next_marker(f, path) -> int:
    b = f.read(1)
    if b != b"\xff":
        raise MediaError(f"{path}: JPEG marker expected at byte {f.tell() - len(b)}")
    while b == b"\xff":  # fill bytes
        b = f.read(1)
    if not b:
        raise MediaError(f"{path}: JPEG ends before its frame header")
    return b[0]


def wav_header(path) -> WavHeader:
    """A PCM WAV's ``fmt `` chunk and where its ``data`` lies, checked against the file's size."""
    f, size = _open(path)
    with f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise MediaError(f"{path}: not a WAV file (no RIFF/WAVE header)")
        fmt = None
        for _ in range(MAX_SEGMENTS):
            h = f.read(8)
            if len(h) < 8:
                raise MediaError(f"{path}: WAV without a data chunk")
            kind, n = h[:4], struct.unpack("<I", h[4:])[0]
            if kind == b"data":
                if fmt is None:
                    raise MediaError(f"{path}: WAV data chunk before its fmt chunk")
                return _wav_data(path, fmt, f.tell(), n, size)
            if kind == b"fmt ":
                fmt = _wav_fmt(path, f.read(min(n, 40)), n)
                n -= min(n, 40)
            f.seek(n + (n & 1), os.SEEK_CUR)  # chunks are padded to an even length
    raise MediaError(f"{path}: WAV without a data chunk in its first {MAX_SEGMENTS} chunks")


def _wav_fmt(path, body: bytes, n: int) -> tuple[int, int, int]:
    if n < 16 or len(body) < 16:
        raise MediaError(f"{path}: WAV fmt chunk of {n} bytes (16 at least)")
    tag, ch, rate, _, align, bits = struct.unpack("<HHIIHH", body[:16])
    if tag not in WAV_FORMATS:
        raise MediaError(f"{path}: WAV format {tag:#06x} is not supported (PCM, format 1)")
    width = bits // 8
    if bits % 8 or width not in WAV_WIDTHS:
        raise MediaError(f"{path}: {bits}-bit samples are not supported (8, 16 or 32-bit PCM)")
    if ch < 1 or align != ch * width:
        raise MediaError(f"{path}: WAV of {ch} channel(s) with {align}-byte frames ({bits}-bit samples)")
    return ch, width, rate


def _wav_data(path, fmt, offset: int, n: int, size: int) -> WavHeader:
    ch, width, rate = fmt
    frame = ch * width
    if n > size - offset:
        raise MediaError(f"{path}: WAV declares {n} bytes of samples, the file holds {size - offset} (truncated)")
    if n % frame:
        raise MediaError(f"{path}: WAV data of {n} bytes is cut mid-frame ({frame}-byte frames)")
    if n == 0:
        raise MediaError(f"{path}: WAV without samples")
    return WavHeader(ch, width, rate, n // frame, offset)


def _read_at(path, offset: int, n: int) -> bytes:
    f, _ = _open(path)
    with f:
        f.seek(offset)
        return f.read(n)


def _open(path):
    """(the file open for reading, its size): a regular file only (a FIFO or device would block or
    never end), through the toolkit's one check (store/inputs.py); MediaError otherwise."""
    from inkling_probe.store.inputs import BadInputFile, open_regular

    try:
        f = open_regular(path, "media file", max_bytes=None)
    except BadInputFile as e:
        raise MediaError(str(e)) from None
    return f, os.fstat(f.fileno()).st_size


def _u16(b: bytes, path) -> int:
    if len(b) < 2:
        raise MediaError(f"{path}: JPEG ends inside a segment length")
    return struct.unpack(">H", b)[0]

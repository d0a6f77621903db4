"""The input processor: images -> patches, waveforms -> dMel levels, placeholder expansion.

As transformers' InklingImageProcessor / InklingFeatureExtractor / InklingProcessor compute them:

- image ``[H, W, 3]`` uint8: a grid of ``ceil(H/P)`` rows x ``W//P + 1`` columns of P x P patches
  (row-major; edge patches padded bottom/right with -1 before normalising, as transformers does),
  normalised with CLIP mean/std (fused with the 1/255 rescale), repeated over 2 frames:
  ``pixel_values [N, T, P, P, 3]``, one token per patch;
- waveform (mono, 16 kHz): log10 mel energies (Slaney mel filters, periodic Hann window of 2 hops,
  hop 50 ms, left-padded by ``n_fft - hop``), clamped to [-7, 2] and quantised to the nearest of
  ``mel_vocab_size`` evenly spaced levels: ``audio_ids [frames, n_mel_bins]``, one token per frame;
- placeholders: each image / audio placeholder token in the prompt becomes one token per patch /
  frame, or, when the prompt holds none, ``[<bos of the media>, placeholder x N]`` is inserted after
  the prompt's first token (or at the start) for each item. Counts that do not match are one
  :class:`MediaError`, never a silent wrong fuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import MultimodalConfig

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HOP_S, WINDOW_MULT = 0.05, 2.0


class MediaError(ValueError):
    """Media and placeholders that do not fit together (one line)."""


def patch_grid(height: int, width: int, patch: int) -> tuple[int, int]:
    """(rows, cols) of the patch grid of an image (transformers' get_patch_grid: always one extra column)."""
    return (height + patch - 1) // patch, width // patch + 1


def to_rgb(image: np.ndarray) -> np.ndarray:
    """uint8 grey ``[H, W]`` / ``[H, W, 1]``, grey+alpha ``[H, W, 2]``, RGB or RGBA -> RGB ``[H, W, 3]``, as
    transformers' ``do_convert_rgb`` does for a PIL image: grey repeated over 3 channels, transparency
    composited onto white with Pillow's ``alpha_composite`` integer arithmetic (bit-identical to it)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (1, 2, 3, 4)):
        raise MediaError(f"an image must be uint8 [H, W] grey or [H, W, 1|2|3|4] (grey, grey+alpha, RGB, RGBA), "
                         f"got {image.dtype} {tuple(image.shape)}")
    if image.ndim == 2:
        image = image[..., None]
    if image.shape[2] in (1, 2):
        image = np.concatenate([np.repeat(image[..., :1], 3, axis=2), image[..., 1:]], axis=2)
    if image.shape[2] == 3:
        return np.ascontiguousarray(image)
    return _over_white(image)


def _over_white(rgba: np.ndarray) -> np.ndarray:
    """Pillow's ``alpha_composite(white, rgba)`` (libImaging/AlphaComposite.c, 7 precision bits)."""
    a = rgba[..., 3:4].astype(np.uint32)
    c = rgba[..., :3].astype(np.uint32)
    outa255 = a * 255 + 255 * (255 - a)  # = 255 * 255: the white background is opaque
    coef1 = a * 255 * 255 * (1 << 7) // outa255
    coef2 = 255 * (1 << 7) - coef1
    tmp = c * coef1 + 255 * coef2 + (0x80 << 7)
    out = (((tmp >> 8) + tmp) >> 8) >> 7
    return np.where(a == 0, 255, out).astype(np.uint8)


def image_patches(image: np.ndarray, patch: int, frames: int = 2) -> torch.Tensor:
    """uint8 ``[H, W, 3]`` (or anything :func:`to_rgb` takes) -> pixel_values ``[N, frames, P, P, 3]`` float32."""
    image = to_rgb(image)
    x = torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).float()  # [3, H, W] (a writable copy)
    rows, cols = patch_grid(x.shape[1], x.shape[2], patch)
    out = torch.full((rows * cols, 3, patch, patch), -1.0)
    for i in range(rows):
        for j in range(cols):
            p = x[:, i * patch:(i + 1) * patch, j * patch:(j + 1) * patch]
            out[i * cols + j, :, : p.shape[1], : p.shape[2]] = p
    mean = torch.tensor(CLIP_MEAN) * (1.0 / (1 / 255))  # transformers fuses the rescale into mean/std
    std = torch.tensor(CLIP_STD) * (1.0 / (1 / 255))
    out = (out - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)  # [N, 3, P, P]
    return out[..., None].repeat(1, 1, 1, 1, frames).permute(0, 4, 2, 3, 1).contiguous()  # [N, T, P, P, 3]


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    mel = 3.0 * f / 200.0
    logstep = 27.0 / np.log(6.4)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) * logstep, mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), 200.0 * m / 3.0)


def mel_filters(n_freq: int, n_mels: int, sampling_rate: int) -> torch.Tensor:
    """Slaney-normalised triangular mel filters on the Slaney mel scale: ``[n_mels, n_freq]`` float32."""
    mels = np.linspace(_hz_to_mel(0.0), _hz_to_mel(sampling_rate / 2.0), n_mels + 2)
    hz = _mel_to_hz(mels)
    fft = np.linspace(0, sampling_rate // 2, n_freq)
    diff = np.diff(hz)
    slopes = hz[None, :] - fft[:, None]
    down, up = -slopes[:, :-2] / diff[:-1], slopes[:, 2:] / diff[1:]
    bank = np.maximum(0.0, np.minimum(down, up)) * (2.0 / (hz[2: n_mels + 2] - hz[:n_mels]))[None, :]
    return torch.from_numpy(np.ascontiguousarray(bank.T, dtype=np.float32))


def log_mel(wave: torch.Tensor, n_mels: int, sampling_rate: int) -> torch.Tensor:
    """Mono float waveform ``[S]`` -> log10 mel energies ``[ceil(S / hop), n_mels]``."""
    hop = round(HOP_S * sampling_rate)
    win = round(HOP_S * WINDOW_MULT * sampling_rate)
    wave = wave.float().view(1, -1)
    right = math.ceil(wave.shape[-1] / hop) * hop - wave.shape[-1]
    wave = torch.nn.functional.pad(wave, (max(win - hop, 0), right))
    stft = torch.stft(wave, win, hop_length=hop, win_length=win, window=torch.hann_window(win, periodic=True),
                      center=False, return_complex=True)
    mag = torch.view_as_real(stft).pow(2).sum(-1).clamp_min(1e-10).sqrt()  # [1, F, frames]
    mel = mel_filters(win // 2 + 1, n_mels, sampling_rate) @ mag
    return mel.clamp_min(1e-10).log10().transpose(1, 2)[0]  # [frames, n_mels]


def audio_levels(wave: torch.Tensor, mm: MultimodalConfig) -> torch.Tensor:
    """Mono 16 kHz waveform ``[S]`` -> dMel levels ``[frames, n_mel_bins]`` (int64)."""
    if wave.dim() != 1 or wave.numel() == 0:
        raise MediaError(f"audio must be a non-empty mono waveform, got shape {tuple(wave.shape)}")
    mel = log_mel(wave, mm.audio.n_mel_bins, mm.sampling_rate)
    centers = torch.linspace(mm.dmel_min_value, mm.dmel_max_value, mm.audio.mel_vocab_size,
                             dtype=torch.float64).float()
    mel = mel.clamp(mm.dmel_min_value, mm.dmel_max_value)
    return (mel.unsqueeze(-1) - centers).abs().argmin(dim=-1).long()


@dataclass
class MediaInputs:
    """A prompt's media, in prompt order per kind: tower inputs and rows per item."""

    pixel_values: torch.Tensor | None = None  # [N patches, T, P, P, C]
    image_rows: list[int] = field(default_factory=list)  # patches per image
    audio_ids: torch.Tensor | None = None  # [N frames, n_mel_bins]
    audio_rows: list[int] = field(default_factory=list)  # frames per clip

    @classmethod
    def build(cls, mm: MultimodalConfig, images=(), waves=()) -> "MediaInputs":
        """From RGB uint8 arrays and mono 16 kHz waveforms."""
        pix = [image_patches(np.asarray(im), mm.vision.patch_size, mm.vision.temporal_patch_size) for im in images]
        aud = [audio_levels(torch.as_tensor(w), mm) for w in waves]
        return cls(torch.cat(pix) if pix else None, [p.shape[0] for p in pix],
                   torch.cat(aud) if aud else None, [a.shape[0] for a in aud])

    @property
    def empty(self) -> bool:
        return not self.image_rows and not self.audio_rows


def expand_placeholders(tokens: list[int], mm: MultimodalConfig, media: MediaInputs,
                        insert_at: int | None = None) -> list[int]:
    """Expand one placeholder per item into one per patch / frame (module docstring)."""
    out = list(tokens)
    for kind, tok, bos, counts in (("image", mm.image_token_id, mm.image_bos_token_id, media.image_rows),
                                   ("audio", mm.audio_token_id, mm.audio_bos_token_id, media.audio_rows)):
        found = out.count(tok)
        if found == 0 and counts:
            at = insert_at if insert_at is not None else min(1, len(out))
            block = [t for n in counts for t in [bos] + [tok] * n]
            out = out[:at] + block + out[at:]
            continue
        if found == sum(counts) and found != len(counts):
            continue  # already expanded
        if found != len(counts):
            raise MediaError(f"{found} {kind} placeholder(s) (token id {tok}) in the prompt for "
                             f"{len(counts)} {kind}(s) (expected one each, or none to insert them)")
        it = iter(counts)
        out = [t for x in out for t in ([tok] * next(it) if x == tok else [x])]
    return out


def media_layout(input_ids: torch.Tensor, mm: MultimodalConfig, media: MediaInputs) -> list[list]:
    """Which token rows hold which item: ``[[kind, item, first row, rows], ...]`` in row order; every
    other row is text. Raises MediaError when placeholders and features disagree."""
    ids = input_ids.tolist()
    spans = []
    for kind, tok, counts in (("image", mm.image_token_id, media.image_rows),
                              ("audio", mm.audio_token_id, media.audio_rows)):
        rows = [i for i, t in enumerate(ids) if t == tok]
        if len(rows) != sum(counts):
            raise MediaError(f"{kind} placeholders (token id {tok}): {len(rows)} in the prompt for "
                             f"{sum(counts)} {kind} feature rows ({len(counts)} {kind}(s))")
        start = 0
        for item, n in enumerate(counts):
            mine = rows[start:start + n]
            start += n
            for run in _runs(mine):
                spans.append([kind, item, run[0], len(run)])
    return sorted(spans, key=lambda s: s[2])


def _runs(rows: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for r in rows:
        if out and out[-1][-1] == r - 1:
            out[-1].append(r)
        else:
            out.append([r])
    return out

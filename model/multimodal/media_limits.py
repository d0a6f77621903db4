"""How large a media file ``run --image/--audio`` takes, checked from its header before anything is decoded.

Each limit is a named setting with a default that fits a real photo or a real clip; the variable
raises it (or lowers it). A file over a limit is one :class:`MediaError` naming the file, what it
declares and the variable to raise:

| setting | variable | default | why |
|---|---|---|---|
| ``max_pixels`` | ``INKLING_MEDIA_MAX_PIXELS`` | 50 M | a 48 MP phone photo fits; Pillow calls 89 M a bomb |
| ``max_seconds`` | ``INKLING_MEDIA_MAX_SECONDS`` | 600 | ten minutes of audio |
| ``max_channels`` | ``INKLING_MEDIA_MAX_CHANNELS`` | 8 | 7.1 surround; the processor takes the channel mean |
| ``memory_mib`` | ``INKLING_MEDIA_MEMORY_MIB`` | 4096 | the processor's estimated peak for one item |

The model's own maximum is checked too: the prompt with every item's tokens (one per patch or
frame) must fit ``max_position_embeddings`` (:func:`check_tokens`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .processor import HOP_S, WINDOW_MULT, MediaError, patch_grid

ENV = {"max_pixels": "INKLING_MEDIA_MAX_PIXELS", "max_seconds": "INKLING_MEDIA_MAX_SECONDS",
       "max_channels": "INKLING_MEDIA_MAX_CHANNELS", "memory_mib": "INKLING_MEDIA_MEMORY_MIB"}

# The processor's peak, per unit, measured with tracemalloc on numpy and torch's CPU allocator
# (tests/model/test_multimodal_limits.py holds the estimate above the measurement):
IMAGE_BYTES_PER_PIXEL = 40  # decoded RGBA, RGB copies, the float [3, H, W] copy
IMAGE_BYTES_PER_PATCH_VALUE = 4 * 7  # float32 patches: padded, normalised (2), repeated over frames, permuted
AUDIO_BYTES_PER_SAMPLE = 24  # PCM, float32 per channel, the mean, the padded copy
AUDIO_BYTES_PER_BIN = 8 * 4  # the complex STFT, its magnitude and mel products per frame and bin


@dataclass(frozen=True)
class MediaLimits:
    """The limits a media file is checked against from its header (see the module doc)."""

    max_pixels: int = 50_000_000
    max_seconds: float = 600.0
    max_channels: int = 8
    memory_mib: float = 4096.0

    @classmethod
    def from_env(cls, environ=None) -> "MediaLimits":
        """The defaults, overridden by ``INKLING_MEDIA_*`` (a bad value: one-line MediaError)."""
        env = os.environ if environ is None else environ
        got = {}
        for name, var in ENV.items():
            text = env.get(var, "").strip()
            if text:
                got[name] = _positive(var, text, integer=name in ("max_pixels", "max_channels"))
        return cls(**got)

    # -- the checks, one per kind --------------------------------------------------------------
    def check_image(self, path, width: int, height: int, channels: int, patch: int, frames: int) -> int:
        """Tokens (patches) of a ``width`` x ``height`` image, or MediaError when it is over a limit."""
        self.check_pixels(path, width, height)
        rows, cols = patch_grid(height, width, patch)
        est = width * height * (IMAGE_BYTES_PER_PIXEL + channels) \
            + rows * cols * patch * patch * 3 * frames * IMAGE_BYTES_PER_PATCH_VALUE // 2
        self._check_memory(path, f"a {width}x{height} image", est)
        return rows * cols

    def check_audio(self, path, frames: int, channels: int, width: int, rate: int) -> int:
        """Tokens (50 ms frames) of a clip of ``frames`` samples per channel, or MediaError."""
        self.check_clip(path, frames, channels, width, rate)
        seconds = frames / rate
        hop = round(HOP_S * rate)
        tokens = math.ceil(frames / hop)
        bins = round(HOP_S * WINDOW_MULT * rate) // 2 + 1
        est = frames * channels * (width + AUDIO_BYTES_PER_SAMPLE) + (tokens + 2) * bins * AUDIO_BYTES_PER_BIN
        self._check_memory(path, f"{seconds:.1f} s of {channels}-channel audio", est)
        return tokens

    def check_pixels(self, path, width: int, height: int) -> None:
        """MediaError unless ``width`` x ``height`` holds pixels and at most ``max_pixels``."""
        if width < 1 or height < 1:
            raise MediaError(f"{path}: a {width}x{height} image holds no pixels")
        if width * height > self.max_pixels:
            raise MediaError(f"{path}: {width}x{height} = {width * height} pixels, over the limit of "
                             f"{self.max_pixels} ({ENV['max_pixels']})")

    def check_clip(self, path, frames: int, channels: int, width: int, rate: int) -> None:
        """MediaError unless the clip has 1 to ``max_channels`` channels and at most ``max_seconds``."""
        if channels < 1 or channels > self.max_channels:
            raise MediaError(f"{path}: {channels} channels; 1 to {self.max_channels} are taken "
                             f"({ENV['max_channels']})")
        if rate < 1 or frames / rate > self.max_seconds:
            raise MediaError(f"{path}: {frames} frames at {rate} Hz = {frames / max(rate, 1):.1f} s of audio, over "
                             f"the limit of {self.max_seconds:g} s ({ENV['max_seconds']})")

    def _check_memory(self, path, what: str, estimate: int) -> None:
        if estimate > self.memory_mib * (1 << 20):
            raise MediaError(f"{path}: {what} needs about {estimate / (1 << 20):.0f} MiB to process, over the "
                             f"budget of {self.memory_mib:g} MiB ({ENV['memory_mib']})")


def check_tokens(prompt_tokens: int, media_tokens: list[tuple[str, int]], max_positions: int) -> None:
    """The prompt with every item's tokens must fit the model's ``max_position_embeddings``."""
    total = prompt_tokens + sum(n + 1 for _, n in media_tokens)  # + each item's begin-of-media token
    if total > max_positions:
        worst = max(media_tokens, key=lambda m: m[1])
        raise MediaError(f"{worst[0]}: {worst[1]} tokens; the prompt with its media would be {total} tokens, "
                         f"over the model's max_position_embeddings {max_positions}")


def check_rate(path, rate: int, want: int) -> None:
    """MediaError unless a clip is sampled at the processor's rate (nothing is resampled)."""
    if rate != want:
        raise MediaError(f"{path}: sampled at {rate} Hz; the processor takes {want} Hz (resample it first)")


def _positive(var: str, text: str, integer: bool):
    try:
        value = float(text)
    except ValueError:
        raise MediaError(f"{var}={text!r}: expected a number") from None
    if not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
        raise MediaError(f"{var}={text!r}: expected a {'whole ' if integer else ''}number > 0")
    return int(value) if integer else value

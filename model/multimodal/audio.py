"""The dMel audio tower (transformers' InklingAudioModel), replicated on every TP rank.

A frame is ``n_mel_bins`` discrete levels (one per mel bin, each in ``[0, mel_vocab_size)``). Bin b's
level l looks up row ``b * mel_vocab_size + l`` of one shared table (per-codebook offsets), the
``n_mel_bins`` rows are summed and RMS-normed: one token row per 50 ms frame.
Probes: ``audio.embed`` (the summed rows, [N, D]), ``audio.out`` (after the norm, [N, D]).

Planted fault ``audio_codebook_offsets`` (faults.py): the offsets are dropped, every bin reads
codebook 0's rows: born at ``audio.embed``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import inkling_probe
from inkling_model.layers.loading import make_param, replicated_loader
from inkling_model.layers.norm import RMSNorm
from inkling_model.switches import faults

from .config import AudioConfig


class AudioTower(nn.Module):
    """audio_ids [N, n_mel_bins] (levels) -> audio rows [N, text hidden]."""

    def __init__(self, config: AudioConfig):
        super().__init__()
        self.config = config
        self.weight = make_param((config.n_mel_bins * config.mel_vocab_size, config.text_hidden_size),
                                 replicated_loader)
        self.norm = RMSNorm(config.text_hidden_size, config.rms_norm_eps)

    def offsets(self, device=None) -> torch.Tensor:
        """First table row of each bin's codebook: ``[n_mel_bins]``."""
        c = self.config
        if faults.is_active("audio_codebook_offsets"):
            return torch.zeros(c.n_mel_bins, dtype=torch.long, device=device)
        return torch.arange(c.n_mel_bins, device=device) * c.mel_vocab_size

    def forward(self, audio_ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        if audio_ids.dim() != 2 or audio_ids.shape[1] != c.n_mel_bins:
            raise ValueError(f"audio ids must be [frames, {c.n_mel_bins}], got {tuple(audio_ids.shape)}")
        if audio_ids.numel() and (int(audio_ids.min()) < 0 or int(audio_ids.max()) >= c.mel_vocab_size):
            raise ValueError(f"audio levels must lie in [0, {c.mel_vocab_size}), got "
                             f"[{int(audio_ids.min())}, {int(audio_ids.max())}]")
        rows = F.embedding(audio_ids.long() + self.offsets(audio_ids.device), self.weight)  # [N, B, D]
        x = rows.sum(dim=-2)  # [N, D]
        inkling_probe.probe("audio.embed", x)
        x = self.norm(x)
        inkling_probe.probe("audio.out", x)
        return x

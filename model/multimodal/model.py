"""InklingForConditionalGeneration: the text decoder plus the vision and audio towers.

``llm`` is :class:`inkling_model.model.InklingForCausalLM` (tensor-parallel); ``visual`` and
``audio`` are replicated on every rank (the embedding's all-reduce leaves ``h`` whole on each
rank, so each fuses locally) and held in the model dtype (bf16 like the engine's; NVFP4
checkpoints keep them in bf16). A forward with media runs the towers after ``embed`` (same step)
and hands the decoder the fused stream; one without media (decode steps) is the text model's.
"""

from __future__ import annotations

import torch
from torch import nn

import inkling_probe

from inkling_model.config import InklingConfig
from inkling_model.layers.context import StepContext
from inkling_model.model import InklingForCausalLM, _default_dtype
from inkling_model.parallel import Parallel

from .audio import AudioTower
from .config import MultimodalConfig
from .fusion import fuse
from .processor import MediaInputs, media_layout
from .vision import VisionTower


def _text_only(h: torch.Tensor) -> torch.Tensor:
    inkling_probe.probe("fused", h, media=[])
    return h


class InklingForConditionalGeneration(nn.Module):
    """Text decoder (``llm``), ``visual`` and ``audio`` towers; parameters uninitialised (load them)."""

    def __init__(self, config: InklingConfig, mm: MultimodalConfig, tp: Parallel | None = None,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        mm.check(config)
        self.config, self.mm, self.dtype = config, mm, dtype
        self.llm = InklingForCausalLM(config, tp, dtype)
        self.tp = self.llm.tp
        with _default_dtype(dtype):
            self.visual = VisionTower(mm.vision)
            self.audio = AudioTower(mm.audio)

    def new_cache(self, *args, **kwargs):
        """An empty decode cache for one request (as the text model's)."""
        return self.llm.new_cache(*args, **kwargs)

    def encode(self, media: MediaInputs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Tower rows (image [Ni, H], audio [Na, H]) of ``media``."""
        dev = self.llm.embed.weight.device
        image = None if media.pixel_values is None else self.visual(media.pixel_values.to(dev))
        audio = None if media.audio_ids is None else self.audio(media.audio_ids.to(dev))
        return image, audio

    def forward(self, input_ids: torch.Tensor, ctx: StepContext | None = None, last_only: bool = False,
                media: MediaInputs | None = None) -> torch.Tensor:
        """Logits as :meth:`InklingForCausalLM.forward`; ``media`` (prefill) is fused at its placeholders."""
        if media is None or media.empty:  # text only (decode steps): the fused stream is the embedding
            return self.llm(input_ids, ctx, last_only, fuse=_text_only)
        layout = media_layout(input_ids, self.mm, media)  # checks placeholders against features first

        def fused(h: torch.Tensor) -> torch.Tensor:
            image, audio = self.encode(media)
            return fuse(h, layout, image, audio, self.mm.vision.rms_norm_eps)

        return self.llm(input_ids, ctx, last_only, fuse=fused)

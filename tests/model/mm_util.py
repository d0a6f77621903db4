"""Test helpers for multimodal runs: synthetic media, prompts, rank entry points (importable by spawned ranks)."""

from __future__ import annotations

import numpy as np
import torch

import inkling_probe
from inkling_model import parallel
from inkling_model.multimodal.checkpoint import load_multimodal, read_multimodal_config
from inkling_model.multimodal.model import InklingForConditionalGeneration
from inkling_model.multimodal.processor import MediaInputs, expand_placeholders

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def synthetic_image(h: int = 5, w: int = 6, seed: int = 0) -> np.ndarray:
    """A random RGB uint8 image [h, w, 3] (nothing downloaded)."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def synthetic_wave(seconds: float = 0.2, seed: int = 0) -> torch.Tensor:
    """A 16 kHz mono waveform: a chirp plus noise."""
    n = int(16000 * seconds)
    t = np.arange(n) / 16000
    g = np.random.default_rng(seed)
    return torch.from_numpy((0.3 * np.sin(2 * np.pi * (300 + 2000 * t) * t) + 0.05 * g.standard_normal(n))
                            .astype(np.float32))


PROMPTS = {  # kind -> (images, clips)
    "image": (1, 0),
    "audio": (0, 1),
    "image+audio": (1, 1),
}


def prompt(mm, kind: str, text=(1, 5, 6, 7, 8, 9, 10)):
    """(token ids [T], MediaInputs) for a prompt of ``kind``: media placeholders after the 3rd token."""
    n_img, n_aud = PROMPTS[kind]
    media = MediaInputs.build(mm, [synthetic_image(seed=i) for i in range(n_img)],
                              [synthetic_wave(seed=i) for i in range(n_aud)])
    toks = list(text[:3]) + [mm.image_token_id] * n_img + [mm.audio_token_id] * n_aud + list(text[3:])
    return torch.tensor(expand_placeholders(toks, mm, media)), media


def build(ckpt: str, dtype: str, tp=None) -> InklingForConditionalGeneration:
    config, mm = read_multimodal_config(ckpt)
    model = InklingForConditionalGeneration(config, mm, tp, DTYPES[dtype])
    load_multimodal(model, ckpt)
    return model


def run_mm_rank(rank: int, world: int, ckpt: str, ids: list[int], media: MediaInputs, dump: str | None,
                dtype: str = "fp32") -> torch.Tensor:
    """One TP rank: the prompt with its media as one request, recorded to ``dump``; returns logits."""
    model = build(ckpt, dtype, parallel.init() if world > 1 else None)
    with torch.no_grad():
        if dump is None:
            return model(torch.tensor(ids), media=media)
        with inkling_probe.recording(dump):
            return model(torch.tensor(ids), media=media)


def compare_mm(ref_dump: str, cand_dump: str, keys: list[str]) -> dict[str, float]:
    """parity_util.compare, with tower outputs compared across size-1 dims (transformers' vision
    final_norm is [N, 1, 1, 1, D] where inkling_model records [N, D])."""
    from parity_util import compare, rel_rms

    tower = [k for k in keys if k in ("vision.out",)]
    out = compare(ref_dump, cand_dump, [k for k in keys if k not in tower])
    ref, cand = inkling_probe.open(ref_dump), inkling_probe.open(cand_dump)
    for key in tower:
        r, c = ref.tensor(key), cand.tensor(key)
        assert r.squeeze().shape == c.squeeze().shape, f"{key}: {tuple(r.shape)} vs {tuple(c.shape)}"
        out[key] = rel_rms(c.reshape(r.shape), r)
    return out
